-- Per-key ordering. A claim walks the keys that have ready events through
-- the key index, taking each key's lowest ready sequence numbers first; the
-- blocked index finds the keys it must leave alone: those with an event in
-- flight (claimed) or parked behind a dead event.
ALTER TABLE {{.Table}} ADD COLUMN parked boolean NOT NULL DEFAULT false;
CREATE INDEX {{.Name}}_key_idx ON {{.Table}} (topic, key, seq) WHERE state = 'ready';
CREATE INDEX {{.Name}}_blocked_idx ON {{.Table}} (topic, key) WHERE state = 'claimed' OR parked;
