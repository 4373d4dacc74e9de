-- Change-data-capture (herald relay --source cdc): a row may be inserted
-- as 'streamed' (the column's default while a relay reads the table's
-- inserts from the write-ahead log, Driver.StreamInserts). No claim takes
-- a streamed row: the relay publishes it from the log and writes it back
-- as ready or dead only when it fails (Driver.Return). Retention deletes
-- streamed rows by age (created_at) through their own partial index.
--
-- Migration 001 checked the state inline, so its constraint's name was
-- chosen by PostgreSQL: it is found by its column, the state alone (the
-- named checks of migration 004 that read the state read other columns
-- too). The new check keeps the conventional name, so that a refused
-- state is reported as before. On a partitioned table the constraint is
-- dropped from, and added to, the parent, which carries it to every
-- partition. Adding it reads the table once, under the migration's lock;
-- every row passes it, the old rule being narrower.
DO $$
DECLARE
    c name;
BEGIN
    FOR c IN
        SELECT con.conname
        FROM pg_constraint con
        JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attname = 'state'
        WHERE con.conrelid = '{{.Table}}'::regclass AND con.contype = 'c'
          AND con.conkey = ARRAY[a.attnum]
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '{{.Table}}', c);
    END LOOP;
END
$$;

ALTER TABLE {{.Table}} ADD CONSTRAINT {{.Name}}_state_check
    CHECK (state IN ('ready', 'claimed', 'published', 'dead', 'streamed'));

-- Retention deletes the oldest streamed rows first.
CREATE INDEX {{.Name}}_streamed_idx ON {{.Table}} (created_at) WHERE state = 'streamed';
