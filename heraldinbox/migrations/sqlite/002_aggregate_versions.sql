-- The last aggregate version each consumer handled, per aggregate
-- (Inbox.AdvanceSQL): one row per (consumer, aggregate type, aggregate
-- id), raised in the handler's transaction, never lowered. An event whose
-- version is not above the row's is refused. updated_at (microseconds
-- since the Unix epoch) is for operators; nothing reads it.
CREATE TABLE IF NOT EXISTS {{.Versions}} (
    consumer       TEXT    NOT NULL,
    aggregate_type TEXT    NOT NULL,
    aggregate_id   TEXT    NOT NULL,
    version        INTEGER NOT NULL CHECK (version >= 1),
    updated_at     INTEGER NOT NULL DEFAULT ({{.Now}}),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id)) WITHOUT ROWID;
