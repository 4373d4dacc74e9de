-- Key leases (Config.LeaseKeys): an ordered claim may hold a key by one
-- row here instead of writing every event it takes. The row names the
-- claim (token, owner), when its lease ends, and the seq range of the
-- key's events it took, which stay ready in the outbox until the
-- acknowledgement writes them. Every relay of this version reads it,
-- whatever its own mode: a key with a lease is not claimed, and the
-- rescuer ends expired leases. A few rows (the keys in flight), inserted
-- and deleted once per key per batch.
CREATE TABLE {{.Leases}} (
    topic       text        NOT NULL,
    key         text        NOT NULL,
    token       uuid        NOT NULL,
    owner       text        NOT NULL,
    lease_until timestamptz NOT NULL,
    first_seq   bigint      NOT NULL,
    last_seq    bigint      NOT NULL CHECK (last_seq >= first_seq),
    PRIMARY KEY (topic, key)
);
-- The acknowledgement and the release find a claim's leases by token.
CREATE INDEX {{.Name}}_leases_token_idx ON {{.Leases}} (token);
