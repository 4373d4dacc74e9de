-- The inbox: one row per (consumer, event id) a handler processed,
-- inserted in the handler's own transaction. processed_at, by the
-- database clock in UTC, is what Cleanup reads. Keys are VARBINARY:
-- compared byte for byte, as on PostgreSQL and SQLite, and at most
-- MaxKeyLen bytes, which the inbox checks before any SQL runs. MySQL
-- commits every DDL statement on its own: this is one statement that can
-- run again, and MySQL 8 has no CREATE INDEX IF NOT EXISTS, so the index
-- is declared with the table.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    consumer     VARBINARY(255) NOT NULL,
    event_id     VARBINARY(255) NOT NULL,
    processed_at DATETIME(6)    NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    PRIMARY KEY (consumer, event_id),
    INDEX {{.Name}}_processed_idx (processed_at)
) ENGINE = InnoDB;
