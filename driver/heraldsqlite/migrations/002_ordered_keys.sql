-- Per-key ordering, as on PostgreSQL. A claim walks the keys that have ready
-- events through the key index; the blocked index finds the keys it must
-- leave alone: those with an event in flight (claimed) or parked behind a
-- dead event.
ALTER TABLE {{.Table}} ADD COLUMN parked INTEGER NOT NULL DEFAULT 0 CHECK (parked IN (0, 1));
CREATE INDEX {{.Name}}_key_idx ON {{.Table}} (topic, key, seq) WHERE state = 'ready';
CREATE INDEX {{.Name}}_blocked_idx ON {{.Table}} (topic, key) WHERE state = 'claimed' OR parked = 1;
