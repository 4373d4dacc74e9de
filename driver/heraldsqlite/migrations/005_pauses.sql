-- Pauses, as on PostgreSQL: an operator holds a topic, or a destination of
-- the herald daemon (every topic routed to it), and no relay claims its
-- events until it is resumed. Relays read this small table once a second.
-- A resumed pause stays as a row, not in force, for the time it ended:
-- the relay's MaxAge counts from then. Times are integer microseconds.
CREATE TABLE {{.Pauses}} (
    kind       TEXT    NOT NULL CHECK (kind IN ('topic', 'destination')),
    name       TEXT    NOT NULL CHECK (typeof(name) = 'text' AND name <> ''),
    paused     INTEGER NOT NULL DEFAULT 1 CHECK (paused IN (0, 1)),
    reason     TEXT    NOT NULL DEFAULT '',
    paused_by  TEXT    NOT NULL DEFAULT '',
    paused_at  INTEGER NOT NULL DEFAULT ({{.Now}}),
    resumed_at INTEGER,
    PRIMARY KEY (kind, name)
);
