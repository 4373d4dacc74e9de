-- The columns the relay owns refuse values the relay never writes, as on
-- PostgreSQL. Other programs write this table with plain SQL, and SQLite
-- keeps whatever type a value comes with: an attempt count at the integer
-- maximum failed every claim (one more is a REAL, which the column
-- refuses), a BLOB id never matches the text the relay acknowledges with,
-- a lease written as text never runs out.
--
-- SQLite cannot add a CHECK constraint to an existing table; it would have
-- to be rebuilt (create a copy, move every row, drop, rename, recreate
-- the indexes), rewriting the whole file under the write lock. Triggers do
-- the same job on every INSERT and UPDATE, cost a few microseconds a row,
-- and a later migration can drop them. They run after column affinity, so
-- a number written into a TEXT column (kept as text) passes, and a BLOB,
-- which affinity leaves alone, does not.
--
-- Rows written before this migration are brought within the rules first,
-- in the same transaction, which holds the write lock: no row can slip in
-- between.

-- An attempt count outside 0 to a million is brought within it.
UPDATE {{.Table}} SET attempts = min(max(attempts, 0), 1000000)
WHERE attempts NOT BETWEEN 0 AND 1000000;

-- Text columns holding a BLOB (or, for the nullable ones, a number) get
-- its text.
UPDATE {{.Table}}
SET id = CAST(id AS TEXT), topic = CAST(topic AS TEXT), key = CAST(key AS TEXT), type = CAST(type AS TEXT),
    aggregate_type = CAST(aggregate_type AS TEXT), aggregate_id = CAST(aggregate_id AS TEXT),
    claim_token = CAST(claim_token AS TEXT), claimed_by = CAST(claimed_by AS TEXT),
    last_error = CAST(last_error AS TEXT)
WHERE typeof(id) <> 'text' OR typeof(topic) <> 'text' OR typeof(key) <> 'text' OR typeof(type) <> 'text'
   OR typeof(aggregate_type) <> 'text' OR typeof(aggregate_id) <> 'text'
   OR typeof(claim_token) NOT IN ('text', 'null') OR typeof(claimed_by) NOT IN ('text', 'null')
   OR typeof(last_error) NOT IN ('text', 'null');

-- The relay's own timestamps that are not integer microseconds mean
-- nothing; now is as good as any (a lease ending now is rescued).
UPDATE {{.Table}}
SET lease_until = CASE WHEN typeof(lease_until) IN ('integer', 'null') THEN lease_until ELSE {{.Now}} END,
    published_at = CASE WHEN typeof(published_at) IN ('integer', 'null') THEN published_at ELSE {{.Now}} END,
    dead_at = CASE WHEN typeof(dead_at) IN ('integer', 'null') THEN dead_at ELSE {{.Now}} END
WHERE typeof(lease_until) NOT IN ('integer', 'null') OR typeof(published_at) NOT IN ('integer', 'null')
   OR typeof(dead_at) NOT IN ('integer', 'null');

-- A claimed row with no claim token or no lease was not claimed by a relay:
-- it is ready, as the rescuer would make it.
UPDATE {{.Table}} SET state = 'ready', claim_token = NULL, lease_until = NULL
WHERE state = 'claimed' AND (claim_token IS NULL OR lease_until IS NULL);

-- Only a dead event parks its key.
UPDATE {{.Table}} SET parked = 0 WHERE parked = 1 AND state <> 'dead';

-- The rules, for new rows and for every change to a row. The two triggers
-- say the same; SQLite has no trigger for both.
CREATE TRIGGER {{.Name}}_checked_insert BEFORE INSERT ON {{.Table}}
BEGIN
    SELECT CASE
        WHEN NEW.attempts NOT BETWEEN 0 AND 1000000
        THEN RAISE(ABORT, 'herald: attempts must be between 0 and 1000000')
        WHEN typeof(NEW.id) <> 'text' OR typeof(NEW.topic) <> 'text' OR typeof(NEW.key) <> 'text'
          OR typeof(NEW.type) <> 'text' OR typeof(NEW.aggregate_type) <> 'text' OR typeof(NEW.aggregate_id) <> 'text'
        THEN RAISE(ABORT, 'herald: id, topic, key, type, aggregate_type and aggregate_id must be text')
        WHEN typeof(NEW.claim_token) NOT IN ('text', 'null') OR typeof(NEW.claimed_by) NOT IN ('text', 'null')
          OR typeof(NEW.last_error) NOT IN ('text', 'null')
        THEN RAISE(ABORT, 'herald: claim_token, claimed_by and last_error must be text or NULL')
        WHEN typeof(NEW.lease_until) NOT IN ('integer', 'null') OR typeof(NEW.published_at) NOT IN ('integer', 'null')
          OR typeof(NEW.dead_at) NOT IN ('integer', 'null')
        THEN RAISE(ABORT, 'herald: lease_until, published_at and dead_at must be integer microseconds or NULL')
        WHEN NEW.state = 'claimed' AND (NEW.claim_token IS NULL OR NEW.lease_until IS NULL)
        THEN RAISE(ABORT, 'herald: a claimed row needs a claim_token and a lease_until')
        WHEN NEW.parked = 1 AND NEW.state <> 'dead'
        THEN RAISE(ABORT, 'herald: only a dead row parks its key')
    END;
END;

CREATE TRIGGER {{.Name}}_checked_update BEFORE UPDATE ON {{.Table}}
BEGIN
    SELECT CASE
        WHEN NEW.attempts NOT BETWEEN 0 AND 1000000
        THEN RAISE(ABORT, 'herald: attempts must be between 0 and 1000000')
        WHEN typeof(NEW.id) <> 'text' OR typeof(NEW.topic) <> 'text' OR typeof(NEW.key) <> 'text'
          OR typeof(NEW.type) <> 'text' OR typeof(NEW.aggregate_type) <> 'text' OR typeof(NEW.aggregate_id) <> 'text'
        THEN RAISE(ABORT, 'herald: id, topic, key, type, aggregate_type and aggregate_id must be text')
        WHEN typeof(NEW.claim_token) NOT IN ('text', 'null') OR typeof(NEW.claimed_by) NOT IN ('text', 'null')
          OR typeof(NEW.last_error) NOT IN ('text', 'null')
        THEN RAISE(ABORT, 'herald: claim_token, claimed_by and last_error must be text or NULL')
        WHEN typeof(NEW.lease_until) NOT IN ('integer', 'null') OR typeof(NEW.published_at) NOT IN ('integer', 'null')
          OR typeof(NEW.dead_at) NOT IN ('integer', 'null')
        THEN RAISE(ABORT, 'herald: lease_until, published_at and dead_at must be integer microseconds or NULL')
        WHEN NEW.state = 'claimed' AND (NEW.claim_token IS NULL OR NEW.lease_until IS NULL)
        THEN RAISE(ABORT, 'herald: a claimed row needs a claim_token and a lease_until')
        WHEN NEW.parked = 1 AND NEW.state <> 'dead'
        THEN RAISE(ABORT, 'herald: only a dead row parks its key')
    END;
END;
