-- The columns the relay owns refuse values the relay never writes. Other
-- programs write this table with plain SQL; a value such as an attempt
-- count at the integer maximum or a timestamp at infinity used to stop
-- every claim. Each constraint is named, so that a refused INSERT says
-- which rule it broke.
--
-- Rows written before this migration may break the rules. They are brought
-- within them first, in this transaction, so that adding the constraints
-- cannot fail; no write runs in between (the lock below). The constraints
-- are then validated: every row obeys them, which the relay relies on,
-- since PostgreSQL checks every later UPDATE of a row even against a
-- constraint added NOT VALID. The fixes scan the table once each: the
-- outbox table is small when retention runs.
LOCK TABLE {{.Table}} IN SHARE ROW EXCLUSIVE MODE;

-- An attempt count outside 0 to a million is brought within it.
UPDATE {{.Table}} SET attempts = least(greatest(attempts, 0), 1000000)
WHERE attempts NOT BETWEEN 0 AND 1000000;

-- A pending row created at infinity, or never available, cannot be
-- published: it goes to the dead letters, as a claim does with such a row,
-- saying why, and parks its key (the migration cannot know which topics
-- keep no order; an operator resumes the key by requeueing or discarding
-- the row).
UPDATE {{.Table}}
SET state = 'dead', dead_at = now(), parked = (key <> ''), claim_token = NULL, lease_until = NULL,
    last_error = 'herald: unreadable row: ' || CASE WHEN NOT isfinite(created_at)
                                                     THEN 'created_at is ' || created_at::text
                                                     ELSE 'available_at is infinity' END
WHERE state IN ('ready', 'claimed') AND (NOT isfinite(created_at) OR available_at = 'infinity');

-- A pending row available since -infinity is available now.
UPDATE {{.Table}} SET available_at = now()
WHERE state IN ('ready', 'claimed') AND available_at = '-infinity';

-- The relay's own timestamps at infinity mean nothing; now is as good as
-- any (a lease ending now is rescued).
UPDATE {{.Table}}
SET lease_until = CASE WHEN isfinite(lease_until) THEN lease_until ELSE now() END,
    published_at = CASE WHEN isfinite(published_at) THEN published_at ELSE now() END,
    dead_at = CASE WHEN isfinite(dead_at) THEN dead_at ELSE now() END
WHERE NOT (isfinite(lease_until) AND isfinite(published_at) AND isfinite(dead_at));

-- A claimed row with no claim token or no lease was not claimed by a relay:
-- it is ready, as the rescuer would make it.
UPDATE {{.Table}} SET state = 'ready', claim_token = NULL, lease_until = NULL
WHERE state = 'claimed' AND (claim_token IS NULL OR lease_until IS NULL);

-- Only a dead event parks its key.
UPDATE {{.Table}} SET parked = false WHERE parked AND state <> 'dead';

ALTER TABLE {{.Table}}
    ADD CONSTRAINT {{.Name}}_attempts_range CHECK (attempts BETWEEN 0 AND 1000000),
    -- Dead and published rows may keep what they were written with: the
    -- relay reads neither timestamp of them (a requeue renews both).
    ADD CONSTRAINT {{.Name}}_pending_times_finite
        CHECK (state NOT IN ('ready', 'claimed') OR (isfinite(created_at) AND isfinite(available_at))),
    ADD CONSTRAINT {{.Name}}_relay_times_finite
        CHECK (isfinite(lease_until) AND isfinite(published_at) AND isfinite(dead_at)),
    ADD CONSTRAINT {{.Name}}_claim_has_lease
        CHECK (state <> 'claimed' OR (claim_token IS NOT NULL AND lease_until IS NOT NULL)),
    ADD CONSTRAINT {{.Name}}_parked_is_dead CHECK (NOT parked OR state = 'dead');
