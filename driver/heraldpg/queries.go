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

	// An ordered claim is two statements in one transaction. The first
	// walks the keys that have ready events, one index probe each, from a
	// cursor ($1, $2) where the last claim stopped, until it has visited $3
	// keys or found about $4 events. A key is taken when its lowest ready
	// event is available and none of its events is claimed or parked, and
	// only if this transaction gets the key's advisory lock ($7 names the
	// table): a claimer that holds it is the only one deciding for that
	// key. Keys of unordered topics ($6) and the empty key are taken
	// without a lock. Its snapshot may be older than the lock, so the
	// second statement checks again.
	walkKeysSQL = `WITH RECURSIVE walk(topic, key, n, total, ok, size) AS (
		SELECT $1::text, $2::text, 0, 0, false, 0
		UNION ALL
		SELECT nx.topic, nx.key, w.n + 1, w.total + sz.size, c.ok, sz.size
		FROM walk w
		CROSS JOIN LATERAL (
			SELECT o.topic, o.key FROM {{.Table}} o
			WHERE o.state = 'ready' AND (o.topic, o.key) > (w.topic, w.key)
			ORDER BY o.topic, o.key
			LIMIT 1
		) nx
		CROSS JOIN LATERAL (
			SELECT CASE
				WHEN nx.key = '' OR nx.topic = ANY($6::text[]) THEN true
				WHEN (SELECT h.available_at FROM {{.Table}} h
				      WHERE h.state = 'ready' AND h.topic = nx.topic AND h.key = nx.key
				      ORDER BY h.seq LIMIT 1) > now() THEN false
				WHEN EXISTS (SELECT 1 FROM {{.Table}} b
				             WHERE (b.state = 'claimed' OR b.parked) AND b.topic = nx.topic AND b.key = nx.key) THEN false
				ELSE pg_try_advisory_xact_lock($7::integer, hashtext(nx.topic || E'\n' || nx.key))
			END AS ok
		) c
		CROSS JOIN LATERAL (
			SELECT CASE WHEN c.ok THEN (
				SELECT count(*)::integer FROM (
					SELECT 1 FROM {{.Table}} s
					WHERE s.state = 'ready' AND s.topic = nx.topic AND s.key = nx.key
					ORDER BY s.seq LIMIT $5) s)
			ELSE 0 END AS size
			OFFSET 0 -- evaluated once per key, not once per use
		) sz
		WHERE w.n < $3 AND w.total < $4
	)
	SELECT topic, key, ok, size FROM walk WHERE n > 0 ORDER BY n`

	// The second statement claims, for each key the first one took, the
	// key's lowest ready events up to the first not yet available, at most
	// $4 per key and $5 in all. Its snapshot is newer than the key locks,
	// so a claim that committed before them is seen here: a key with an
	// event claimed or parked is left alone, whatever the first statement
	// saw. Unordered keys ($3) take any available events, skipping locked
	// rows.
	claimKeysSQL = `WITH k AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[]) WITH ORDINALITY AS k(topic, key, unordered, n)
	), ordered AS (
		SELECT r.id, k.n, r.seq,
		       bool_and(r.available_at <= now()) OVER (PARTITION BY k.n ORDER BY r.seq) AS go
		FROM k CROSS JOIN LATERAL (
			SELECT o.id, o.seq, o.available_at FROM {{.Table}} o
			WHERE o.state = 'ready' AND o.topic = k.topic AND o.key = k.key
			ORDER BY o.seq
			LIMIT $4
		) r
		WHERE NOT k.unordered
		  AND NOT EXISTS (SELECT 1 FROM {{.Table}} b
		                  WHERE (b.state = 'claimed' OR b.parked) AND b.topic = k.topic AND b.key = k.key)
	), unordered AS (
		SELECT r.id, k.n, r.seq, true AS go
		FROM k CROSS JOIN LATERAL (
			SELECT o.id, o.seq FROM {{.Table}} o
			WHERE o.state = 'ready' AND o.topic = k.topic AND o.key = k.key AND o.available_at <= now()
			ORDER BY o.seq
			LIMIT $4
			FOR UPDATE SKIP LOCKED
		) r
		WHERE k.unordered
	), pick AS (
		SELECT p.id FROM (SELECT * FROM ordered UNION ALL SELECT * FROM unordered) p
		WHERE p.go
		ORDER BY p.n, p.seq
		LIMIT $5
	)
	UPDATE {{.Table}} o
	SET state = 'claimed', claim_token = $6, claimed_by = $7,
	    lease_until = now() + $8 * interval '1 microsecond', attempts = o.attempts + 1
	FROM pick
	WHERE o.id = pick.id AND o.state = 'ready'
	RETURNING o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
	          o.payload, o.headers, o.attempts, o.created_at`

	// Acknowledgement when every event of a batch was confirmed: the
	// common case, kept to one array parameter.
	publishSQL = `UPDATE {{.Table}}
	SET state = 'published', published_at = now(), claim_token = NULL, lease_until = NULL
	WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND state = 'claimed'`

	// Acknowledgement of a batch with failures, still one statement. An
	// outage refunds the claim's attempt; a failure is dead when permanent,
	// out of attempts or past the max age (a zero limit is no limit), and
	// then parks its key when asked to. An event held back behind a failed
	// one of its key goes back to ready with its attempt refunded.
	completeSQL = `WITH f AS (
		SELECT * FROM unnest($1::uuid[], $3::boolean[], $4::text[], $5::bigint[], $6::boolean[], $7::boolean[],
		                     $10::boolean[], $11::boolean[])
		AS f(id, ok, err, delay_us, permanent, outage, held, park)
	), r AS (
		SELECT o.id, f.ok, f.err, f.delay_us, f.outage, f.held, f.park,
		       NOT f.ok AND NOT f.held
		       AND (f.permanent
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
	    parked = r.dead AND r.park,
	    available_at = CASE WHEN r.ok OR r.dead THEN o.available_at
	                        WHEN r.held THEN now()
	                        ELSE now() + r.delay_us * interval '1 microsecond' END,
	    attempts = CASE WHEN r.outage OR r.held THEN o.attempts - 1 ELSE o.attempts END,
	    last_error = CASE WHEN r.ok OR r.held THEN o.last_error ELSE r.err END,
	    claim_token = NULL, lease_until = NULL
	FROM r
	WHERE o.id = r.id AND o.claim_token = $2 AND o.state = 'claimed'
	RETURNING o.id, o.state, r.held, o.parked`

	// Parked keys: one row per dead event that parks its key, with the
	// number of ready events waiting behind it.
	blockedKeysSQL = `SELECT d.topic, d.key, d.id, d.dead_at,
	       (SELECT count(*) FROM {{.Table}} w WHERE w.state = 'ready' AND w.topic = d.topic AND w.key = d.key)
	FROM {{.Table}} d
	WHERE d.parked AND d.state = 'dead'
	ORDER BY d.dead_at, d.seq
	LIMIT $1`

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

	// The backlog reads each state through its partial index: the ready,
	// claimed and dead rows, never the published ones.
	backlogSQL = `SELECT topic, sum(ready)::bigint, sum(claimed)::bigint, sum(dead)::bigint, sum(parked)::bigint,
	       coalesce(extract(epoch FROM now() - min(oldest)), 0)::float8
	FROM (
		SELECT topic, count(*) AS ready, 0 AS claimed, 0 AS dead, 0 AS parked, min(created_at) AS oldest
		FROM {{.Table}} WHERE state = 'ready' GROUP BY topic
		UNION ALL
		SELECT topic, 0, count(*), 0, 0, min(created_at)
		FROM {{.Table}} WHERE state = 'claimed' GROUP BY topic
		UNION ALL
		SELECT topic, 0, 0, count(*), count(*) FILTER (WHERE parked), NULL
		FROM {{.Table}} WHERE state = 'dead' GROUP BY topic
	) b
	GROUP BY topic
	ORDER BY topic`

	statusSQL = `SELECT topic, state, count(*),
	       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
	FROM {{.Table}}
	GROUP BY topic, state
	ORDER BY topic, state`

	eventColumns = `id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers,
	attempts, created_at, state, available_at, lease_until, coalesce(claimed_by, ''),
	published_at, dead_at, coalesce(last_error, ''), parked`
)

type queries struct {
	insertOne, insertMany, claim, walkKeys, claimKeys, publish, complete string
	release, rescue, deletePublished, status, blockedKeys, backlog       string
	table                                                                string
}

func newQueries(n names) queries {
	return queries{
		insertOne:       n.render(insertOneSQL),
		insertMany:      n.render(insertManySQL),
		claim:           n.render(claimSQL),
		walkKeys:        n.render(walkKeysSQL),
		claimKeys:       n.render(claimKeysSQL),
		blockedKeys:     n.render(blockedKeysSQL),
		backlog:         n.render(backlogSQL),
		publish:         n.render(publishSQL),
		complete:        n.render(completeSQL),
		release:         n.render(releaseSQL),
		rescue:          n.render(rescueSQL),
		deletePublished: n.render(deletePublishedSQL),
		status:          n.render(statusSQL),
		table:           n.qualified,
	}
}
