-- The inbox: one row per (consumer, event id) a handler processed,
-- inserted in the handler's own transaction. processed_at is microseconds
-- since the Unix epoch, by the database clock; Cleanup reads it.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    consumer     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    processed_at INTEGER NOT NULL DEFAULT ({{.Now}}),
    PRIMARY KEY (consumer, event_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS "{{.Name}}_processed_idx" ON {{.Table}} (processed_at);
