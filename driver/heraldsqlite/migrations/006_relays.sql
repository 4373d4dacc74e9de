-- Relays, as on PostgreSQL: every relay running on the outbox table records
-- itself here by a heartbeat every few seconds, so that herald status and
-- any relay's admin page list all of them. A relay deletes its row when it
-- stops; the row of a relay that died expires (expires_at) and is deleted
-- by the next heartbeat of any relay. Times are integer microseconds of the
-- database clock.
CREATE TABLE {{.Relays}} (
    owner         TEXT    NOT NULL PRIMARY KEY CHECK (typeof(owner) = 'text' AND owner <> ''),
    version       TEXT    NOT NULL DEFAULT '',
    started_at    INTEGER NOT NULL,
    heartbeat_at  INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    last_claim_at INTEGER,
    leased        INTEGER NOT NULL DEFAULT 0,
    published     INTEGER NOT NULL DEFAULT 0
);
