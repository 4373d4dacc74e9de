-- The last aggregate version each consumer handled, per aggregate
-- (Inbox.AdvanceSQL): one row per (consumer, aggregate type, aggregate
-- id), raised in the handler's transaction, never lowered. An event whose
-- version is not above the row's is refused. Version 0 is the row that
-- AdvanceSQL inserts to lock the aggregate before it raises the version in
-- the same transaction (see mysqlAdvance); a committed 0 means no version
-- yet. updated_at, in UTC, is for operators; nothing reads it. Aggregate
-- types and ids are at most herald.MaxTextFieldLen bytes.
CREATE TABLE IF NOT EXISTS {{.Versions}} (
    consumer       VARBINARY(255)  NOT NULL,
    aggregate_type VARBINARY(1024) NOT NULL,
    aggregate_id   VARBINARY(1024) NOT NULL,
    version        BIGINT          NOT NULL,
    updated_at     DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id),
    CHECK (version >= 0)
) ENGINE = InnoDB;
