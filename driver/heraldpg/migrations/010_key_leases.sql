-- Key leases (Config.LeaseKeys): an ordered claim may hold a key by one
-- row here instead of writing every event it takes. The row names the
-- claim (token, owner), when its lease ends, and the seq range of the
-- key's events it took, which stay ready in the outbox until the
-- acknowledgement writes them. Every relay of this version reads it,
-- whatever its own mode: a key with a lease is not claimed, and the
-- acknowledgement, the release and the rescuer end leases by token. A
-- few rows (the keys in flight), inserted and deleted once per key per
-- batch: the primary key is its only index.
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
