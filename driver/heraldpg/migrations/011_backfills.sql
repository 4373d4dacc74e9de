-- Backfills (heraldbackfill, `herald backfill`): how far each named
-- backfill got. A batch's events and the update of its row here commit in
-- one transaction, so a backfill resumes after the last key whose events
-- committed: no row gets two events, none is skipped. source is the
-- backfill's definition (topic, table or query, key columns,
-- expressions), compared on every resume. One row per backfill; nothing
-- else reads it.
CREATE TABLE {{.Schema}}."{{.Name}}_backfills" (
    name       text        PRIMARY KEY CHECK (name <> ''),
    source     text        NOT NULL,
    last_key   text[],
    rows_done  bigint      NOT NULL DEFAULT 0,
    done       boolean     NOT NULL DEFAULT false,
    started_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
