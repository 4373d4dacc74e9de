-- The inbox: one row per (consumer, event id) a handler processed,
-- inserted in the handler's own transaction. processed_at, by the
-- database clock, is what Cleanup reads.
CREATE SCHEMA IF NOT EXISTS {{.Schema}};
CREATE TABLE IF NOT EXISTS {{.Table}} (
    consumer     text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id));
CREATE INDEX IF NOT EXISTS "{{.Name}}_processed_idx" ON {{.Table}} (processed_at);
