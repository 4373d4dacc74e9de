-- The event contract's versions, as on PostgreSQL. event_version is the
-- version of the payload's schema (1 unless the producer says otherwise,
-- so rows written with plain SQL are version 1); aggregate_version is,
-- optionally, the aggregate's version after the event, NULL when the
-- producer gives none. Publishers carry both to the broker as
-- Herald-Event-Version and Herald-Aggregate-Version.
--
-- A column added with a constant default rewrites nothing, and SQLite
-- checks an added column's CHECK against the rows already there (which
-- all hold 1 and NULL). The checks refuse a value of another type, which
-- SQLite would otherwise keep (a REAL, a text that is not a number).
ALTER TABLE {{.Table}} ADD COLUMN event_version INTEGER NOT NULL DEFAULT 1
    CHECK (typeof(event_version) = 'integer' AND event_version BETWEEN 1 AND 2147483647);
ALTER TABLE {{.Table}} ADD COLUMN aggregate_version INTEGER
    CHECK (aggregate_version IS NULL OR (typeof(aggregate_version) = 'integer' AND aggregate_version >= 1));
