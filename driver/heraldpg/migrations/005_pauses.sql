-- Pauses: an operator holds a topic, or a destination of the herald daemon
-- (every topic routed to it), and no relay claims its events until it is
-- resumed. Relays read this small table once a second; the claim leaves
-- the paused topics alone, so their events stay ready and untouched. A
-- resumed pause stays as a row, not in force, for the time it ended: the
-- relay's MaxAge counts from then.
CREATE TABLE {{.Pauses}} (
    kind       text        NOT NULL CHECK (kind IN ('topic', 'destination')),
    name       text        NOT NULL CHECK (name <> ''),
    paused     boolean     NOT NULL DEFAULT true,
    reason     text        NOT NULL DEFAULT '',
    paused_by  text        NOT NULL DEFAULT '',
    paused_at  timestamptz NOT NULL DEFAULT now(),
    resumed_at timestamptz,
    PRIMARY KEY (kind, name)
);
