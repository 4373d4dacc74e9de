-- Pauses, as on PostgreSQL and SQLite: an operator holds a topic, or a
-- destination of the herald daemon (every topic routed to it), and no relay
-- claims its events until it is resumed. Relays read this small table once
-- a second. A resumed pause stays as a row, not in force, for the time it
-- ended: the relay's MaxAge counts from then.
--
-- Versions 2 to 4 are changes to the PostgreSQL and SQLite tables that this
-- driver's first table had from the start; the versions go on from 5 so
-- that one number means one schema whatever the database.
--
-- name is VARBINARY, compared byte for byte like the outbox's topic, and
-- short enough for the primary key (Herald caps it at 1024 bytes). Times
-- are DATETIME(6) in UTC, as in the outbox table. One statement, run again
-- as a no-op if the migration was cut short before its row was recorded.
CREATE TABLE IF NOT EXISTS {{.Pauses}} (
    kind       VARCHAR(11) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    name       VARBINARY(1024) NOT NULL,
    paused     BOOLEAN         NOT NULL DEFAULT TRUE,
    reason     VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    paused_by  VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
    paused_at  DATETIME(6)     NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    resumed_at DATETIME(6)     NULL,
    PRIMARY KEY (kind, name),
    CONSTRAINT {{.Name}}_pause_kind_known CHECK (kind IN ('topic', 'destination')),
    CONSTRAINT {{.Name}}_pause_name_set CHECK (name <> '')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
