package heraldpg

// Key leases (the default; Config.ClaimRows turns them off; migration
// 010). An ordered claim in this
// mode writes one row per key it takes into the leases table, with the
// seq range of the events it took, and no event row: they stay ready
// until the acknowledgement writes each of them once, as published, dead
// or ready again. Every relay reads the leases, whatever its own mode: the
// walk and the claims pass a leased key (walkKeysSQL, claimKeysSQL,
// notLeasedSQL), and the rescuer ends expired leases (rescueLeasesSQL).
// Only a relay in this mode makes leases, and only its tokens have any:
// its acknowledgements and releases are the statements below, which
// handle both the keys it leased and the rows it claimed (keyless events
// and unordered topics, which have no key to lease, are claimed as rows).
//
// Fencing: the acknowledgement locks the batch's leases by token before
// it writes a row. A rescuer that deleted a lease first leaves it nothing
// to lock, so it writes nothing of that key; a rescuer that comes second
// skips the locked lease. The attempt a claim counts is written by the
// acknowledgement (by the rescuer, for a lease that expired), so that an
// event that kills its relay every time still dies after MaxAttempts.

const (
	// The ordered claim's last step in this mode, after claimKeysSQL's
	// pick: a lease per ordered key of which it took at least $10 events
	// (Config.LeaseMinEvents), the rows of the other keys claimed, and
	// every event picked returned with this claim's attempt.
	// The lease's primary key is a second guard behind the walk's key
	// lock: a second claimer of the key fails its insert.
	claimKeysLeaseSQL = `, picked AS (
		SELECT p.id, p.seq, p.topic, p.key,
		       NOT p.free AND count(*) OVER (PARTITION BY p.topic, p.key) >= $10 AS leased
		FROM pick p
	), leased AS (
		INSERT INTO {{.Leases}} (topic, key, token, owner, lease_until, first_seq, last_seq)
		SELECT p.topic, p.key, $6, $7, now() + $8 * interval '1 microsecond', min(p.seq), max(p.seq)
		FROM picked p
		WHERE p.leased
		GROUP BY p.topic, p.key
	), rows AS (
		UPDATE {{.Table}} o
		SET state = 'claimed', claim_token = $6, claimed_by = $7,
		    lease_until = now() + $8 * interval '1 microsecond', attempts = least(greatest(o.attempts, 0), 999999) + 1
		WHERE o.id = ANY(ARRAY(SELECT id FROM picked WHERE NOT leased)) AND o.state = 'ready'
		RETURNING ` + claimedColumnsSQL + `
	)
	SELECT * FROM rows
	UNION ALL
	SELECT o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
	       o.event_version, coalesce(o.aggregate_version, 0), o.payload, o.headers,
	       least(greatest(o.attempts, 0), 999999) + 1, o.created_at
	FROM {{.Table}} o
	WHERE o.id = ANY(ARRAY(SELECT id FROM picked WHERE leased))`

	// The leases of this claim ($2), locked; and, once written, ended: a
	// lease ends when no ready event of its range is left that the
	// statement does not name ($1; a claim that disposes of a key's
	// unreadable event first, or the release of a paused destination's
	// events, acknowledges part of a batch; the rest keeps the key
	// leased).
	leaseHeldSQL = `held AS (
		SELECT l.topic, l.key, l.owner, l.first_seq, l.last_seq FROM {{.Leases}} l
		WHERE l.token = $2
		FOR UPDATE
	), ended AS (
		DELETE FROM {{.Leases}} l USING held h
		WHERE l.topic = h.topic AND l.key = h.key
		  AND NOT EXISTS (SELECT 1 FROM {{.Table}} r
		                  WHERE r.state = 'ready' AND r.topic = h.topic AND r.key = h.key
		                    AND r.seq BETWEEN h.first_seq AND h.last_seq AND r.id <> ALL($1::uuid[]))
	)`
	// Whether this claim ($2) holds rows (keyless events, unordered
	// topics, keys of fewer than LeaseMinEvents events), as the driver
	// that made it knows (Driver.leaseOnly; true when it does not): a
	// parameter, so a one-time filter whatever the plan, and a batch of
	// leased keys alone does not look up its events a second time for
	// rows it has none of. The acknowledgements that publish only take it
	// third, those with failures ninth.
	publishHasRowsSQL  = `$3::boolean`
	completeHasRowsSQL = `$9::boolean`
	// A named event held by one of those leases: ready, in its range.
	leasedRowSQL = `o.id = ` + batchIDsSQL + ` AND o.state = 'ready' AND o.topic = h.topic AND o.key = h.key
		  AND o.seq BETWEEN h.first_seq AND h.last_seq`
	// The attempt the claim did not write.
	leasedAttemptSQL = `least(greatest(o.attempts, 0), 999999) + 1`

	publishLeasedSQL = `WITH ` + leaseHeldSQL + `, leased AS (
		UPDATE {{.Table}} o
		SET state = 'published', published_at = now(), attempts = ` + leasedAttemptSQL + `, claimed_by = h.owner
		FROM held h
		WHERE ` + leasedRowSQL + `
		RETURNING 1
	), rows AS (` + publishSQL + ` AND ` + publishHasRowsSQL + `
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM leased) + (SELECT count(*) FROM rows)`

	publishDeleteLeasedSQL = `WITH ` + leaseHeldSQL + `, leased AS (
		DELETE FROM {{.Table}} o USING held h
		WHERE ` + leasedRowSQL + `
		RETURNING 1
	), rows AS (` + publishDeleteSQL + ` AND ` + publishHasRowsSQL + `
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM leased) + (SELECT count(*) FROM rows)`

	leasedSetSQL = completeSetHeadSQL + `
	    attempts = CASE WHEN f.refund THEN o.attempts ELSE ` + leasedAttemptSQL + ` END,
	    claimed_by = h.owner,` + completeSetTailSQL

	completeLeasedSQL = completeRowsSQL + `, ` + leaseHeldSQL + `, leased AS (
		UPDATE {{.Table}} o
		SET ` + leasedSetSQL + `
		FROM f, held h
		WHERE o.id = f.id AND ` + leasedRowSQL + `
		RETURNING o.id, f.ok
	), rows AS (
		UPDATE {{.Table}} o
		SET ` + completeSetSQL + `
		FROM f
		WHERE o.id = f.id AND o.id = ` + batchIDsSQL + ` AND o.claim_token = $2 AND o.state = 'claimed' AND ` + completeHasRowsSQL + `
		RETURNING o.id, f.ok
	)
	SELECT id, ok FROM leased UNION ALL SELECT id, ok FROM rows`

	completeDeleteLeasedSQL = completeRowsSQL + `, ` + leaseHeldSQL + `, leasedGone AS (
		DELETE FROM {{.Table}} o USING f, held h
		WHERE f.ok AND o.id = f.id AND ` + leasedRowSQL + `
		RETURNING o.id
	), leasedKept AS (
		UPDATE {{.Table}} o
		SET ` + leasedSetSQL + `
		FROM f, held h
		WHERE NOT f.ok AND o.id = f.id AND ` + leasedRowSQL + `
		RETURNING o.id
	), gone AS (
		DELETE FROM {{.Table}} o USING f
		WHERE f.ok AND o.id = f.id AND o.id = ` + batchIDsSQL + ` AND o.claim_token = $2 AND o.state = 'claimed' AND ` + completeHasRowsSQL + `
		RETURNING o.id
	), kept AS (
		UPDATE {{.Table}} o
		SET ` + completeSetSQL + `
		FROM f
		WHERE NOT f.ok AND o.id = f.id AND o.id = ` + batchIDsSQL + ` AND o.claim_token = $2 AND o.state = 'claimed' AND ` + completeHasRowsSQL + `
		RETURNING o.id
	)
	SELECT id, true FROM leasedGone UNION ALL SELECT id, false FROM leasedKept
	UNION ALL SELECT id, true FROM gone UNION ALL SELECT id, false FROM kept`

	// A claim whose answer was lost: its leases end and its rows go back.
	// It counts the leased events that were still ready.
	releaseClaimLeasedSQL = `WITH gone AS (
		DELETE FROM {{.Leases}} WHERE token = $1
		RETURNING topic, key, first_seq, last_seq
	), rows AS (` + releaseClaimSQL + `
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM gone g JOIN {{.Table}} o
	        ON o.state = 'ready' AND o.topic = g.topic AND o.key = g.key AND o.seq BETWEEN g.first_seq AND g.last_seq)
	     + (SELECT count(*) FROM rows)`

	// The rescuer's part for leases, whoever made them: expired leases
	// end, and the events of their ranges that are still ready count the
	// attempt their claim did not write, with the reason. A lease at
	// infinity was not written by a relay (one always sets a finite
	// lease): it ends too. The leases found are deleted by their row's
	// address (ctid), which the lock keeps for the statement.
	rescueLeasesSQL = `, lx AS (
		SELECT ctid FROM {{.Leases}}
		WHERE lease_until < now() OR lease_until = 'infinity'
		ORDER BY lease_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	), lgone AS (
		DELETE FROM {{.Leases}} l
		WHERE l.ctid = ANY(ARRAY(SELECT ctid FROM lx))
		RETURNING l.topic, l.key, l.owner, l.first_seq, l.last_seq
	), counted AS (
		UPDATE {{.Table}} o
		SET attempts = ` + leasedAttemptSQL + `,
		    last_error = 'lease expired: relay ' || g.owner || ' did not acknowledge in time'
		FROM lgone g
		WHERE o.state = 'ready' AND o.topic = g.topic AND o.key = g.key AND o.seq BETWEEN g.first_seq AND g.last_seq
		RETURNING 1
	)`
)

// What operators see (herald status, the backlog, the admin page): a
// ready event in a lease's range is claimed, by the lease's owner, until
// the lease's end.
const (
	leaseOfRowSQL = `l.topic = o.topic AND l.key = o.key AND o.seq BETWEEN l.first_seq AND l.last_seq`

	// The rows for statusSQL: every row with the state operators see.
	statusRowsSQL = `SELECT o.topic, CASE WHEN o.state = 'ready' AND EXISTS (
		SELECT 1 FROM {{.Leases}} l WHERE ` + leaseOfRowSQL + `) THEN 'claimed' ELSE o.state END AS state, o.created_at
	FROM {{.Table}} o`

	// backlogSQL's part that moves the leased events from ready to
	// claimed: one row per topic with leases, counted by a probe of the
	// key's ready events per lease.
	leasedBacklogSQL = `SELECT l.topic, -sum(c.n), sum(c.n), 0, 0, NULL
		FROM {{.Leases}} l CROSS JOIN LATERAL (
			SELECT count(*) AS n FROM {{.Table}} o WHERE o.state = 'ready' AND ` + leaseOfRowSQL + `) c
		GROUP BY l.topic`

	// The outbox's rows with the state, lease, owner and attempt (the
	// one in progress) operators see, for eventColumns; raw_state is the row's own state, which a filter
	// on it reads through the table's partial indexes (viewWhere).
	eventsViewSQL = `(SELECT o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
		o.event_version, o.aggregate_version, o.payload, o.headers,
		CASE WHEN l.topic IS NULL THEN o.attempts ELSE ` + leasedAttemptSQL + ` END AS attempts, o.created_at,
		CASE WHEN l.topic IS NULL THEN o.state ELSE 'claimed' END AS state, o.state AS raw_state,
		o.available_at, coalesce(l.lease_until, o.lease_until) AS lease_until,
		coalesce(l.owner, o.claimed_by) AS claimed_by, o.published_at, o.dead_at, o.last_error, o.parked
	FROM {{.Table}} o LEFT JOIN {{.Leases}} l ON o.state = 'ready' AND ` + leaseOfRowSQL + `) e`
)
