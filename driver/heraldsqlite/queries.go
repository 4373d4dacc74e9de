package heraldsqlite

// The driver's SQL. {{.Table}} is the quoted outbox table, {{.Now}} the
// database clock in microseconds. Claims are single statements: SQLite has
// one writer at a time, so a claim never sees rows another claim holds and
// needs no SKIP LOCKED.

const nowSQL = `CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)`

const (
	insertPrefixSQL = `INSERT INTO {{.Table}}
	(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at) VALUES `
	insertTupleSQL = `(?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, {{.Now}}))`

	claimSQL = `UPDATE {{.Table}}
	SET state = 'claimed', claim_token = ?1, claimed_by = ?2, lease_until = {{.Now}} + ?3,
	    attempts = attempts + 1
	WHERE seq IN (
		SELECT seq FROM {{.Table}}
		WHERE state = 'ready' AND available_at <= {{.Now}}
		ORDER BY available_at, seq
		LIMIT ?4
	)
	RETURNING id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers, attempts, created_at`

	publishSQL = `UPDATE {{.Table}}
	SET state = 'published', published_at = {{.Now}}, claim_token = NULL, lease_until = NULL
	WHERE claim_token = ?1 AND state = 'claimed' AND id IN (SELECT value FROM json_each(?2))`

	// Failures travel as one JSON array of objects, so that a batch's
	// outcome is one statement whatever its size.
	failSQL = `UPDATE {{.Table}} AS o
	SET state = CASE WHEN f.dead THEN 'dead' ELSE 'ready' END,
	    dead_at = CASE WHEN f.dead THEN {{.Now}} END,
	    available_at = CASE WHEN f.dead THEN o.available_at ELSE {{.Now}} + f.delay END,
	    attempts = CASE WHEN f.outage THEN o.attempts - 1 ELSE o.attempts END,
	    last_error = f.err, claim_token = NULL, lease_until = NULL
	FROM (
		SELECT x.id, x.err, x.delay, x.outage,
		       (x.permanent OR (NOT x.outage AND r.attempts >= ?3) OR r.created_at < {{.Now}} - ?4) AS dead
		FROM (
			SELECT json_extract(value, '$.id') AS id, json_extract(value, '$.err') AS err,
			       json_extract(value, '$.delay') AS delay, json_extract(value, '$.permanent') AS permanent,
			       json_extract(value, '$.outage') AS outage
			FROM json_each(?2)
		) AS x JOIN {{.Table}} AS r ON r.id = x.id
	) AS f
	WHERE o.id = f.id AND o.claim_token = ?1 AND o.state = 'claimed'
	RETURNING id, state`

	releaseSQL = `UPDATE {{.Table}}
	SET state = 'ready', attempts = max(attempts - 1, 0), claim_token = NULL, lease_until = NULL
	WHERE claim_token = ?1 AND state = 'claimed' AND id IN (SELECT value FROM json_each(?2))`

	rescueSQL = `UPDATE {{.Table}}
	SET state = 'ready', claim_token = NULL, lease_until = NULL,
	    last_error = 'lease expired: relay ' || coalesce(claimed_by, 'unknown') || ' did not acknowledge in time'
	WHERE seq IN (
		SELECT seq FROM {{.Table}}
		WHERE state = 'claimed' AND lease_until < {{.Now}}
		ORDER BY lease_until
		LIMIT ?1
	)`

	deletePublishedSQL = `DELETE FROM {{.Table}}
	WHERE seq IN (
		SELECT seq FROM {{.Table}}
		WHERE state = 'published' AND published_at < {{.Now}} - ?1
		ORDER BY published_at
		LIMIT ?2
	)`

	statusSQL = `SELECT topic, state, count(*), {{.Now}} - min(created_at)
	FROM {{.Table}}
	GROUP BY topic, state
	ORDER BY topic, state`

	eventColumns = `id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers,
	attempts, created_at, state, available_at, lease_until, coalesce(claimed_by, ''),
	published_at, dead_at, coalesce(last_error, '')`
)
