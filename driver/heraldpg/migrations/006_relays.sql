-- Relays: every relay running on the outbox table records itself here by a
-- heartbeat every few seconds (herald.Heartbeats), so that herald status and
-- any relay's admin page list all of them: owner, Herald version, start,
-- leased rows, published count, last claim. A relay deletes its row when it
-- stops; the row of a relay that died expires (expires_at) and is deleted by
-- the next heartbeat of any relay. Times are the database clock's. No relay
-- reads this table to decide anything: it is for operators.
CREATE TABLE {{.Relays}} (
    owner         text        PRIMARY KEY CHECK (owner <> ''),
    version       text        NOT NULL DEFAULT '',
    started_at    timestamptz NOT NULL,
    heartbeat_at  timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,
    last_claim_at timestamptz,
    leased        bigint      NOT NULL DEFAULT 0,
    published     bigint      NOT NULL DEFAULT 0
);
