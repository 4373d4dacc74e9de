-- The event contract's versions. event_version is the version of the
-- payload's schema (1 unless the producer says otherwise, so rows written
-- with plain SQL before or after this migration are version 1);
-- aggregate_version is, optionally, the aggregate's version after the
-- event, NULL when the producer gives none. Publishers carry both to the
-- broker as Herald-Event-Version and Herald-Aggregate-Version.
--
-- Adding a column with a constant default rewrites nothing; the checks
-- read the table once, under the migration's lock, and every row passes
-- them (1 and NULL).
ALTER TABLE {{.Table}}
    ADD COLUMN event_version integer NOT NULL DEFAULT 1
        CONSTRAINT {{.Name}}_event_version_positive CHECK (event_version >= 1),
    ADD COLUMN aggregate_version bigint
        CONSTRAINT {{.Name}}_aggregate_version_positive CHECK (aggregate_version >= 1);
