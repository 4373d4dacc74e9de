-- The last aggregate version each consumer handled, per aggregate
-- (Inbox.AdvancePgx): one row per (consumer, aggregate type, aggregate
-- id), raised in the handler's transaction, never lowered. An event whose
-- version is not above the row's is refused. updated_at is for operators
-- (when did this consumer last change the aggregate); nothing reads it.
CREATE TABLE IF NOT EXISTS {{.Versions}} (
    consumer       text        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    version        bigint      NOT NULL CHECK (version >= 1),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id));
