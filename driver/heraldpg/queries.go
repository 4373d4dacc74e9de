package heraldpg

// The driver's SQL. {{.Table}} is the quoted, schema-qualified outbox table;
// it is filled in once per driver from validated names. Durations travel as
// microseconds so that every timestamp is computed by the database clock.

const (
	insertOneSQL = `INSERT INTO {{.Table}}
	(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, coalesce($9::timestamptz, now()))`

	// One statement for any number of messages: arrays travel as
	// parameters, so N messages cost one round trip and one plan.
	insertManySQL = `INSERT INTO {{.Table}}
	(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at)
	SELECT u.id, u.topic, u.key, u.type, u.aggregate_type, u.aggregate_id, u.payload,
	       u.headers::jsonb, coalesce(u.available_at, now())
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
	            $7::bytea[], $8::text[], $9::timestamptz[])
	     WITH ORDINALITY AS u(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at, n)
	ORDER BY u.n`

	// The claim: one index probe for the oldest ready rows, locked with
	// SKIP LOCKED so concurrent relays take different rows, and marked in
	// the same statement. The lease ends by the database clock.
	claimSQL = `WITH next AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'ready' AND available_at <= now()
		ORDER BY available_at, seq
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
	UPDATE {{.Table}} o
	SET state = 'claimed', claim_token = $2, claimed_by = $3,
	    lease_until = now() + $4 * interval '1 microsecond', attempts = o.attempts + 1
	FROM next
	WHERE o.id = next.id
	RETURNING o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
	          o.payload, o.headers, o.attempts, o.created_at`

	// Acknowledgement when every event of a batch was confirmed: the
	// common case, kept to one array parameter.
	publishSQL = `UPDATE {{.Table}}
	SET state = 'published', published_at = now(), claim_token = NULL, lease_until = NULL
	WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND state = 'claimed'`

	// Acknowledgement of a batch with failures, still one statement. An
	// outage refunds the claim's attempt; a failure is dead when permanent,
	// out of attempts or past the max age (a zero limit is no limit).
	completeSQL = `WITH f AS (
		SELECT * FROM unnest($1::uuid[], $3::boolean[], $4::text[], $5::bigint[], $6::boolean[], $7::boolean[])
		AS f(id, ok, err, delay_us, permanent, outage)
	), r AS (
		SELECT o.id, f.ok, f.err, f.delay_us, f.outage,
		       NOT f.ok AND (f.permanent
		                     OR (NOT f.outage AND $8::integer > 0 AND o.attempts >= $8::integer)
		                     OR ($9::bigint > 0 AND o.created_at < now() - $9::bigint * interval '1 microsecond')) AS dead
		FROM {{.Table}} o JOIN f ON o.id = f.id
		WHERE o.claim_token = $2 AND o.state = 'claimed'
		FOR UPDATE OF o
	)
	UPDATE {{.Table}} o
	SET state = CASE WHEN r.ok THEN 'published' WHEN r.dead THEN 'dead' ELSE 'ready' END,
	    published_at = CASE WHEN r.ok THEN now() END,
	    dead_at = CASE WHEN r.dead THEN now() END,
	    available_at = CASE WHEN r.ok OR r.dead THEN o.available_at
	                        ELSE now() + r.delay_us * interval '1 microsecond' END,
	    attempts = CASE WHEN r.outage THEN o.attempts - 1 ELSE o.attempts END,
	    last_error = CASE WHEN r.ok THEN o.last_error ELSE r.err END,
	    claim_token = NULL, lease_until = NULL
	FROM r
	WHERE o.id = r.id AND o.claim_token = $2 AND o.state = 'claimed'
	RETURNING o.id, o.state`

	releaseSQL = `UPDATE {{.Table}}
	SET state = 'ready', attempts = greatest(attempts - 1, 0), claim_token = NULL, lease_until = NULL
	WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND state = 'claimed'`

	// Rows whose lease ran out belong to a relay that died or stalled. The
	// rows are chosen once, in a CTE: as a correlated IN (...) subquery the
	// planner may re-run the LIMIT per outer row and ignore the limit.
	rescueSQL = `WITH expired AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'claimed' AND lease_until < now()
		ORDER BY lease_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	)
	UPDATE {{.Table}} o
	SET state = 'ready', claim_token = NULL, lease_until = NULL,
	    last_error = 'lease expired: relay ' || coalesce(o.claimed_by, 'unknown') || ' did not acknowledge in time'
	FROM expired
	WHERE o.id = expired.id AND o.state = 'claimed' AND o.lease_until < now()`

	// Retention in small batches: each statement locks at most $2 rows,
	// chosen once in a CTE for the same reason as the rescue.
	deletePublishedSQL = `WITH old AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'published' AND published_at < now() - $1 * interval '1 microsecond'
		ORDER BY published_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	DELETE FROM {{.Table}} o USING old WHERE o.id = old.id`

	statusSQL = `SELECT topic, state, count(*),
	       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
	FROM {{.Table}}
	GROUP BY topic, state
	ORDER BY topic, state`

	eventColumns = `id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers,
	attempts, created_at, state, available_at, lease_until, coalesce(claimed_by, ''),
	published_at, dead_at, coalesce(last_error, '')`
)

type queries struct {
	insertOne, insertMany, claim, publish, complete, release, rescue, deletePublished, status string
	table                                                                                     string
}

func newQueries(n names) queries {
	return queries{
		insertOne:       n.render(insertOneSQL),
		insertMany:      n.render(insertManySQL),
		claim:           n.render(claimSQL),
		publish:         n.render(publishSQL),
		complete:        n.render(completeSQL),
		release:         n.render(releaseSQL),
		rescue:          n.render(rescueSQL),
		deletePublished: n.render(deletePublishedSQL),
		status:          n.render(statusSQL),
		table:           n.qualified,
	}
}
