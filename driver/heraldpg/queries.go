package heraldpg

import "strings"

// The driver's SQL. {{.Table}} is the quoted, schema-qualified outbox table;
// it is filled in once per driver from validated names. Durations travel as
// microseconds so that every timestamp is computed by the database clock.

// The recovery from a dropped replication slot (RequeueStreamed): the
// streamed rows written since a time become ready, a batch at a time,
// through the streamed rows' partial index.
const requeueStreamedSQL = `WITH s AS (
	SELECT id, created_at FROM {{.Table}}
	WHERE state = 'streamed' AND created_at >= $1
	ORDER BY created_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {{.Table}} o
SET state = 'ready', available_at = now(), attempts = 0
FROM s
WHERE o.id = s.id AND o.created_at = s.created_at AND o.state = 'streamed'`

// forgetSlotSQL deletes a slot's record of positions (migration 009).
const forgetSlotSQL = `DELETE FROM {{.Schema}}."{{.Name}}_cdc" WHERE slot = $1`

const (
	insertOneSQL = `INSERT INTO {{.Table}}
	(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at,
	 event_version, aggregate_version)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, coalesce($9::timestamptz, now()), $10, $11)`

	// One statement for any number of messages: arrays travel as
	// parameters, so N messages cost one round trip and one plan.
	insertManySQL = `INSERT INTO {{.Table}}
	(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at,
	 event_version, aggregate_version)
	SELECT u.id, u.topic, u.key, u.type, u.aggregate_type, u.aggregate_id, u.payload,
	       u.headers::jsonb, coalesce(u.available_at, now()), u.event_version, u.aggregate_version
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
	            $7::bytea[], $8::text[], $9::timestamptz[], $10::int4[], $11::int8[])
	     WITH ORDINALITY AS u(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at,
	                          event_version, aggregate_version, n)
	ORDER BY u.n`

	// Config.DeleteAfterInsert: the rows a writer inserted, deleted in
	// the same transaction by a second statement. The insert's own
	// statement cannot do it: every part of a statement sees one
	// snapshot, so a data-modifying CTE does not find rows another part
	// inserts. Only streamed rows go: one inserted as ready (the table is
	// relayed by polling) is the claims' to deliver. created_at = now()
	// holds for every row the writer inserted (its default, the
	// transaction's start time), and prunes a partitioned table to the
	// partition that row went to.
	deleteOneSQL = `DELETE FROM {{.Table}}
	WHERE id = $1 AND state = 'streamed' AND created_at = now()`
	deleteManySQL = `DELETE FROM {{.Table}}
	WHERE id = ANY($1::uuid[]) AND state = 'streamed' AND created_at = now()`

	// Config.EmitMessages: a writer's messages as transactional logical
	// decoding messages, in one statement for any number of them, which
	// emits them when the table's inserts default to streamed and returns
	// one row per message, and otherwise emits nothing and returns no row:
	// the writer then inserts them as rows with insertOneSQL or
	// insertManySQL (no relay reads the messages of a table relayed by
	// polling, so a message written there would be lost). Whether the
	// table is streamed is read once (an InitPlan) from the state column's
	// default: a few catalog index probes. The statement names the table
	// in a subquery that reads nothing, so it takes the table's lock
	// (ACCESS SHARE, at parse analysis or when a cached plan is
	// revalidated, held to the end of the transaction) and opens neither
	// the table nor its indexes; an insert in the statement, even of no
	// row, would open all of them on every call (a fifth of the
	// statement's time under concurrent producers). The switch of the
	// default (Driver.StreamInserts) needs ACCESS EXCLUSIVE, so it cannot
	// commit between the check and the producer's commit, nor between the
	// check and the fallback insert: a message emitted on a streamed table
	// commits before the switch back to polling, which `herald source
	// poll` waits for the relay to read past. The check reads the catalog
	// with the statement's snapshot, taken after that lock in READ
	// COMMITTED; a REPEATABLE READ or SERIALIZABLE transaction reads it
	// with its first snapshot, which misses a switch that committed while
	// the statement waited for the lock.
	//
	// Order: the messages are emitted by the outer query's target list,
	// one row at a time as they come out of e, a subquery sorted in the
	// order given (n) and kept a subquery by OFFSET 0. The function is
	// volatile and parallel unsafe, so the plan is one process's
	// pipeline, and each call writes its WAL record as it runs
	// (TestEmitMessagesKeepTheOrderGiven reads them back).
	//
	// The content is the event as a JSON object (emitBody), which the
	// writer encodes, payload in base64 and no field whose value is the
	// column's default; the statement puts two fields in front of it: a
	// seq drawn from the table's sequence, as an insert's would be (so
	// that an event the relay writes back keeps its place among its key's
	// rows, see returnSQL), and created_at by the database clock (now(),
	// as the column's default; to_json writes ISO 8601 whatever the
	// session's DateStyle). Splicing text costs the database a few
	// microseconds per event, less than building the object in SQL or
	// inserting a row with its index entries (BenchmarkWriteTxCDC).
	// driver/heraldcdc decodes the messages.
	emitOneSQL = emitHeadSQL + `
		SELECT $1::text AS body
		WHERE ` + emitStreamedSQL + ` AND NOT EXISTS (SELECT FROM ONLY {{.Table}} WHERE false)
	) e`
	emitManySQL = emitHeadSQL + `
		SELECT b.body FROM unnest($1::text[]) WITH ORDINALITY AS b(body, n)
		WHERE ` + emitStreamedSQL + ` AND NOT EXISTS (SELECT FROM ONLY {{.Table}} WHERE false)
		ORDER BY b.n OFFSET 0
	) e`
	emitStreamedSQL = `coalesce((
			SELECT pg_get_expr(ad.adbin, ad.adrelid) IN ('''streamed''::text', '''streamed''')
			FROM pg_attribute a JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
			WHERE a.attrelid = '{{.Table}}'::regclass AND a.attname = 'state' AND NOT a.attisdropped), false)`
	emitHeadSQL = `SELECT pg_logical_emit_message(true, '{{.EventPrefix}}',
		'{"seq":' || nextval((SELECT pg_get_serial_sequence('{{.Table}}', 'seq'))::regclass) ||
		',"created_at":' || to_json(now())::text || ',' || substr(e.body, 2))
	FROM (`

	// The claim: one index probe for the oldest ready rows, locked with
	// SKIP LOCKED so concurrent relays take different rows, and marked in
	// the same statement. The lease ends by the database clock. Rows are
	// taken while the bytes of those before them are under $5 (the relay's
	// MaxInFlightBytes left): octet_length reads a payload's size from its
	// header, without fetching it. The rows are updated by id = ANY(ARRAY(
	// ...)), not by a join: an array of ids is probed in the primary key
	// whatever the planner estimates, where a join may be planned as a hash
	// join that reads the whole table (a fresh backlog, a generic plan).
	// The attempt count stops at sqlstore.MaxAttempts, whatever another
	// program wrote in the column: an overflow would fail every claim.
	// An event in the range of a key's lease (key leases, the default) is
	// another claim's, still ready: it is dropped after the probe, among
	// the few rows it found, so that the probe stays one (a condition in
	// it may be planned as an anti join that reads every ready row), and
	// the claim takes the rest.
	claimSQL = `WITH cand AS (
		SELECT id, topic, key, available_at, seq, octet_length(payload) + coalesce(pg_column_size(headers), 0) AS size
		FROM {{.Table}}
		WHERE state = 'ready' AND available_at <= now()
		ORDER BY available_at, seq
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	), next AS (
		SELECT c.id FROM (
			SELECT id, topic, key, seq, sum(size) OVER (ORDER BY available_at, seq ROWS UNBOUNDED PRECEDING) - size AS before
			FROM cand) c
		WHERE c.before < $5
		  AND NOT EXISTS (SELECT 1 FROM {{.Leases}} l
		                  WHERE l.topic = c.topic AND l.key = c.key AND c.seq BETWEEN l.first_seq AND l.last_seq)
	)
	UPDATE {{.Table}} o
	SET state = 'claimed', claim_token = $2, claimed_by = $3,
	    lease_until = now() + $4 * interval '1 microsecond', attempts = least(greatest(o.attempts, 0), 999999) + 1
	WHERE o.id = ANY(ARRAY(SELECT id FROM next))
	RETURNING o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
	          o.event_version, coalesce(o.aggregate_version, 0), o.payload, o.headers, o.attempts, o.created_at`

	// An ordered claim is two statements in one transaction. The first
	// walks the keys that have ready events, one index probe each, from a
	// cursor ($1, $2) where the last claim stopped, until it has visited $3
	// keys or found about $4 events. A key is taken when its lowest ready
	// event is available and none of its events is claimed or parked, and
	// only if this transaction gets the key's advisory lock ($7 names the
	// table): a claimer that holds it is the only one deciding for that
	// key. Keys of unordered topics ($6), the empty key, and every key when
	// $9 (an unordered relay's claim while topics are paused) are taken
	// without a lock. A key of a paused topic ($8) is never taken, and the
	// walk's next probe passes the rest of its topic (o.topic > w.topic):
	// a paused topic costs one probe however many keys wait in it. Of the
	// two probes only the one whose w.skip matches runs (a one-time
	// filter). Its snapshot may be older than the lock, so the second
	// statement checks again.
	walkKeysSQL = `WITH RECURSIVE walk(topic, key, n, total, ok, size, skip) AS (
		SELECT $1::text, $2::text, 0, 0, false, 0, false
		UNION ALL
		SELECT nx.topic, nx.key, w.n + 1, w.total + sz.size, c.ok, sz.size, c.paused
		FROM walk w
		CROSS JOIN LATERAL (
			SELECT x.topic, x.key FROM (
				(SELECT o.topic, o.key FROM {{.Table}} o
				 WHERE NOT w.skip AND o.state = 'ready' AND (o.topic, o.key) > (w.topic, w.key)
				 ORDER BY o.topic, o.key
				 LIMIT 1)
				UNION ALL
				(SELECT o.topic, o.key FROM {{.Table}} o
				 WHERE w.skip AND o.state = 'ready' AND o.topic > w.topic
				 ORDER BY o.topic, o.key
				 LIMIT 1)
			) x
			LIMIT 1
		) nx
` + walkTakeSQL + `		WHERE w.n < $3 AND w.total < $4
	)
	SELECT topic, key, ok, size FROM walk WHERE n > 0 ORDER BY n`

	// walkTakeSQL is what a walk decides of the key nx it found (see
	// walkKeysSQL and fairWalkSQL): c.paused, c.ok (taken, locked when
	// ordered) and sz.size (its ready events, at most $5, when taken).
	walkTakeSQL = `CROSS JOIN LATERAL (
			SELECT nx.topic = ANY($8::text[]) AS paused, CASE
				WHEN nx.topic = ANY($8::text[]) THEN false
				WHEN nx.key = '' OR $9::boolean OR nx.topic = ANY($6::text[]) THEN true
				WHEN (SELECT h.available_at FROM {{.Table}} h
				      WHERE h.state = 'ready' AND h.topic = nx.topic AND h.key = nx.key
				      ORDER BY h.seq LIMIT 1) > now() THEN false
				WHEN EXISTS (SELECT 1 FROM {{.Table}} b
				             WHERE (b.state = 'claimed' OR b.parked) AND b.topic = nx.topic AND b.key = nx.key) THEN false
				WHEN EXISTS (SELECT 1 FROM {{.Leases}} l WHERE l.topic = nx.topic AND l.key = nx.key) THEN false
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
`

	// Fair claims (Config.FairBy, fair.go). {{.Fair}} is the fairness key
	// of row o as text: o.topic, a header's value or a column's, '' when
	// the row has none; an index on ({{.Fair}}, topic, key, seq) WHERE
	// state = 'ready' serves every probe (for o.topic, the key index of
	// migration 002).
	//
	// fairValuesSQL: the values with ready events, one index probe each
	// (a loose index scan), from the last when $2, else before $1, at most
	// $3 of them. The scan runs from the last value down: a probe lands
	// at the end of a value's range, where its newest keys are, not at
	// its start, which a drained backlog leaves full of the index entries
	// of published rows until vacuum clears them (each value's walk moves
	// on from its cursor and does not pass them again). Of the first two
	// probes only the one whose $2 matches runs (a one-time filter).
	fairValuesSQL = `WITH RECURSIVE v(val, n) AS (
		SELECT x.val, 1 FROM (
			(SELECT {{.Fair}} AS val FROM {{.Table}} o
			 WHERE $2::boolean AND o.state = 'ready'
			 ORDER BY {{.Fair}} DESC LIMIT 1)
			UNION ALL
			(SELECT {{.Fair}} AS val FROM {{.Table}} o
			 WHERE NOT $2::boolean AND o.state = 'ready' AND {{.Fair}} < $1::text
			 ORDER BY {{.Fair}} DESC LIMIT 1)
		) x
		UNION ALL
		SELECT (SELECT {{.Fair}} FROM {{.Table}} o
		        WHERE o.state = 'ready' AND {{.Fair}} < v.val
		        ORDER BY {{.Fair}} DESC LIMIT 1), v.n + 1
		FROM v WHERE v.val IS NOT NULL AND v.n < $3
	)
	SELECT val FROM v WHERE val IS NOT NULL ORDER BY n`

	// fairWalkSQL walks the keys of several values at once, in turns: each
	// value ($10) from its own cursor ($1, $2), one index probe per key,
	// each until it has visited $3 keys or found about $4 events. The rows
	// of one turn come out together (ORDER BY n, g), so that a claim of
	// what the walk found in that order gives every value its share before
	// it gives any more. What is taken of a key is decided as in
	// walkKeysSQL (walkTakeSQL, with the same parameters $5 to $9).
	fairWalkSQL = `WITH RECURSIVE walk(g, val, topic, key, n, total, ok, size, skip) AS (
		SELECT g.g, g.val, g.topic, g.key, 0, 0, false, 0, false
		FROM unnest($10::text[], $1::text[], $2::text[]) WITH ORDINALITY AS g(val, topic, key, g)
		UNION ALL
		SELECT w.g, w.val, nx.topic, nx.key, w.n + 1, w.total + sz.size, c.ok, sz.size, c.paused
		FROM walk w
		CROSS JOIN LATERAL (
			SELECT x.topic, x.key FROM (
				(SELECT o.topic, o.key FROM {{.Table}} o
				 WHERE NOT w.skip AND o.state = 'ready' AND {{.Fair}} = w.val AND (o.topic, o.key) > (w.topic, w.key)
				 ORDER BY {{.Fair}}, o.topic, o.key
				 LIMIT 1)
				UNION ALL
				(SELECT o.topic, o.key FROM {{.Table}} o
				 WHERE w.skip AND o.state = 'ready' AND {{.Fair}} = w.val AND o.topic > w.topic
				 ORDER BY {{.Fair}}, o.topic, o.key
				 LIMIT 1)
			) x
			LIMIT 1
		) nx
` + walkTakeSQL + `		WHERE w.n < $3 AND w.total < $4
	)
	SELECT g, topic, key, ok, size FROM walk WHERE n > 0 ORDER BY n, g`

	// The second statement claims, for each key the first one took, the
	// key's lowest ready events up to the first not yet available, at most
	// $4 per key and $5 in all, while the bytes of those before them are
	// under $9 (as in claimSQL). Its snapshot is newer than the key locks,
	// so a claim that committed before them is seen here: a key with an
	// event claimed or parked is left alone, whatever the first statement
	// saw. Unordered keys ($3) take any available events, skipping locked
	// rows, but not those in a lease's range (key leases, the default), dropped
	// among the few found as in claimSQL.
	claimKeysSQL = `WITH k AS (
		SELECT * FROM unnest($1::text[], $2::text[], $3::boolean[]) WITH ORDINALITY AS k(topic, key, unordered, n)
	), ordered AS (
		SELECT r.id, k.n, r.seq, r.size,
		       bool_and(r.available_at <= now()) OVER (PARTITION BY k.n ORDER BY r.seq) AS go, false AS free, k.topic, k.key
		FROM k CROSS JOIN LATERAL (
			SELECT o.id, o.seq, o.available_at, octet_length(o.payload) + coalesce(pg_column_size(o.headers), 0) AS size
			FROM {{.Table}} o
			WHERE o.state = 'ready' AND o.topic = k.topic AND o.key = k.key
			ORDER BY o.seq
			LIMIT $4
		) r
		WHERE NOT k.unordered
		  AND NOT EXISTS (SELECT 1 FROM {{.Table}} b
		                  WHERE (b.state = 'claimed' OR b.parked) AND b.topic = k.topic AND b.key = k.key)
		  AND NOT EXISTS (SELECT 1 FROM {{.Leases}} l WHERE l.topic = k.topic AND l.key = k.key)
	), unordered AS (
		SELECT r.id, k.n, r.seq, r.size, true AS go, true AS free, k.topic, k.key
		FROM k CROSS JOIN LATERAL (
			SELECT o.id, o.seq, octet_length(o.payload) + coalesce(pg_column_size(o.headers), 0) AS size
			FROM {{.Table}} o
			WHERE o.state = 'ready' AND o.topic = k.topic AND o.key = k.key AND o.available_at <= now()
			ORDER BY o.seq
			LIMIT $4
			FOR UPDATE SKIP LOCKED
		) r
		WHERE k.unordered
		  AND NOT EXISTS (SELECT 1 FROM {{.Leases}} l
		                  WHERE l.topic = k.topic AND l.key = k.key AND r.seq BETWEEN l.first_seq AND l.last_seq)
	), first AS (
		SELECT p.id, p.n, p.seq, p.size, p.free, p.topic, p.key FROM (SELECT * FROM ordered UNION ALL SELECT * FROM unordered) p
		WHERE p.go
		ORDER BY p.n, p.seq
		LIMIT $5
	), pick AS (
		SELECT f.id, f.seq, f.free, f.topic, f.key FROM (
			SELECT id, n, seq, free, topic, key, sum(size) OVER (ORDER BY n, seq ROWS UNBOUNDED PRECEDING) - size AS before
			FROM first) f
		WHERE f.before < $9
	)` + claimKeysRowsSQL

	// How an ordered claim marks what it picked when it writes rows (not
	// key leases): every row, claimed by the token.
	claimKeysRowsSQL = `
	UPDATE {{.Table}} o
	SET state = 'claimed', claim_token = $6, claimed_by = $7,
	    lease_until = now() + $8 * interval '1 microsecond', attempts = least(greatest(o.attempts, 0), 999999) + 1
	WHERE o.id = ANY(ARRAY(SELECT id FROM pick)) AND o.state = 'ready'
	RETURNING ` + claimedColumnsSQL

	claimedColumnsSQL = `o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id,
	          o.event_version, coalesce(o.aggregate_version, 0), o.payload, o.headers, o.attempts, o.created_at`

	// Acknowledgement when every event of a batch was confirmed: the
	// common case, kept to one array parameter.
	publishSQL = `UPDATE {{.Table}}
	SET state = 'published', published_at = now(), claim_token = NULL, lease_until = NULL
	WHERE id = ` + batchIDsSQL + ` AND claim_token = $2 AND state = 'claimed'`

	// With CompleteParams.Delete, the confirmed rows are deleted instead:
	// a deleted row leaves no new version and no index entry behind, and
	// retention has nothing to do for it.
	publishDeleteSQL = `DELETE FROM {{.Table}}
	WHERE id = ` + batchIDsSQL + ` AND claim_token = $2 AND state = 'claimed'`

	// Acknowledgement of a batch with failures, still one statement. The
	// relay decided each row's outcome; the statement only writes it:
	// published, dead (parking its key or not) or ready again after a
	// delay, with the claim's attempt refunded or not, and a new
	// last_error where one is given.
	completeSQL = completeRowsSQL + `
	UPDATE {{.Table}} o
	SET ` + completeSetSQL + `
	FROM f
	WHERE o.id = f.id AND o.id = ` + batchIDsSQL + ` AND o.claim_token = $2 AND o.state = 'claimed'
	RETURNING o.id, f.ok`

	// The same with CompleteParams.Delete: the confirmed rows are deleted
	// and the others updated, by two parts of one statement that touch
	// different rows.
	completeDeleteSQL = completeRowsSQL + `, gone AS (
		DELETE FROM {{.Table}} o USING f
		WHERE f.ok AND o.id = f.id AND o.id = ` + batchIDsSQL + ` AND o.claim_token = $2 AND o.state = 'claimed'
		RETURNING o.id
	), kept AS (
		UPDATE {{.Table}} o
		SET ` + completeSetSQL + `
		FROM f
		WHERE NOT f.ok AND o.id = f.id AND o.id = ` + batchIDsSQL + ` AND o.claim_token = $2 AND o.state = 'claimed'
		RETURNING o.id
	)
	SELECT id, true FROM gone UNION ALL SELECT id, false FROM kept`

	// batchIDsSQL is the ids of an acknowledged batch ($1), probed in the
	// primary key whatever the planner knows of the table: an array it
	// reads in the statement, it may weigh 1,000 ids against a table it
	// takes for small (never analyzed, a few hundred thousand rows) and
	// plan a scan of the whole table; an array from a subquery it takes
	// for a few ids, which are probes
	// (TestAcknowledgementsAreIDProbesWhateverThePlan).
	batchIDsSQL = `ANY(ARRAY(SELECT unnest($1::uuid[])))`

	completeRowsSQL = `WITH f AS (
		SELECT * FROM unnest($1::uuid[], $3::boolean[], $4::boolean[], $5::boolean[], $6::boolean[],
		                     $7::bigint[], $8::text[])
		AS f(id, ok, dead, park, refund, delay_us, err)
	)`
	completeSetSQL = completeSetHeadSQL + `
	    attempts = CASE WHEN f.refund THEN greatest(o.attempts, 1) - 1 ELSE o.attempts END,` + completeSetTailSQL
	// What an acknowledgement writes of each row, but for the attempt
	// (the claim counted it in the row, or not: leasedSetSQL).
	completeSetHeadSQL = `state = CASE WHEN f.ok THEN 'published' WHEN f.dead THEN 'dead' ELSE 'ready' END,
	    published_at = CASE WHEN f.ok THEN now() END,
	    dead_at = CASE WHEN f.dead THEN now() END,
	    parked = f.park,
	    available_at = CASE WHEN f.ok OR f.dead THEN o.available_at
	                        ELSE now() + f.delay_us * interval '1 microsecond' END,`
	completeSetTailSQL = `
	    last_error = coalesce(f.err, o.last_error),
	    claim_token = NULL, lease_until = NULL`

	// Parked keys: one row per dead event that parks its key, with the
	// number of ready events waiting behind it.
	blockedKeysSQL = `SELECT d.topic, d.key, d.id, d.dead_at,
	       (SELECT count(*) FROM {{.Table}} w WHERE w.state = 'ready' AND w.topic = d.topic AND w.key = d.key)
	FROM {{.Table}} d
	WHERE d.parked AND d.state = 'dead'
	ORDER BY d.dead_at, d.seq
	LIMIT $1`

	// A claim whose answer was lost: its rows, if it committed, go back at
	// once. The claimed rows are few and read through a partial index.
	releaseClaimSQL = `UPDATE {{.Table}}
	SET state = 'ready', attempts = greatest(attempts, 1) - 1, claim_token = NULL, lease_until = NULL
	WHERE state = 'claimed' AND claim_token = $1`

	// Rows whose lease ran out belong to a relay that died or stalled. The
	// rows are chosen once, in a CTE: as a correlated IN (...) subquery the
	// planner may re-run the LIMIT per outer row and ignore the limit. A
	// claimed row with no lease, or an endless one, was not claimed by a
	// relay (one always sets a finite lease): it is rescued too, or its key
	// would wait forever. The rows are then updated by id = ANY(ARRAY(...)),
	// as in claimSQL: a join may be planned to read every partition.
	rescueSQL = `WITH expired AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'claimed' AND ` + leaseOverSQL + `
		ORDER BY lease_until
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	), rows AS (
		UPDATE {{.Table}} o
		SET state = 'ready', claim_token = NULL, lease_until = NULL,
		    last_error = 'lease expired: relay ' || coalesce(o.claimed_by, 'unknown') || ' did not acknowledge in time'
		WHERE o.id = ANY(ARRAY(SELECT id FROM expired)) AND o.state = 'claimed' AND ` + leaseOverSQL + `
		RETURNING 1
	)` + rescueLeasesSQL + `
	SELECT (SELECT count(*) FROM rows) + (SELECT count(*) FROM counted)`
	leaseOverSQL = `(lease_until < now() OR lease_until IS NULL OR lease_until = 'infinity')`

	// Retention in small batches: each statement locks at most $2 rows,
	// chosen once in a CTE for the same reason as the rescue: published
	// rows first, then, up to the same bound, streamed rows created before
	// the cutoff (change-data-capture; see deleteStreamedSQL). Each kind
	// is read through its partial index; the streamed one is an empty
	// probe on a table relayed by polling.
	deletePublishedSQL = `WITH old AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'published' AND published_at < now() - $1 * interval '1 microsecond'
		ORDER BY published_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	), streamed AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'streamed' AND created_at < now() - $1 * interval '1 microsecond'
		ORDER BY created_at
		LIMIT $2 - (SELECT count(*) FROM old)
		FOR UPDATE SKIP LOCKED
	)
	DELETE FROM {{.Table}} o WHERE o.id = ANY(ARRAY(SELECT id FROM old UNION ALL SELECT id FROM streamed))`

	// Streamed rows past retention, by their age: the relay published them
	// from the write-ahead log and never writes them again, unless one
	// fails, when Return writes it back whole (same id, seq and
	// created_at) whether its row is still here or not. Deleting one is
	// therefore always safe. The partitioned table's retention drops
	// whole partitions of them; this deletes those that no drop takes (in
	// the default partition, or in a partition kept for a pending row).
	// created_at prunes the partitions newer than the cutoff.
	deleteStreamedSQL = `WITH old AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'streamed' AND created_at < now() - $1 * interval '1 microsecond'
		ORDER BY created_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	DELETE FROM {{.Table}} o
	WHERE o.id = ANY(ARRAY(SELECT id FROM old)) AND o.state = 'streamed'
	  AND o.created_at < now() - $1 * interval '1 microsecond'`

	// Change-data-capture (herald.StreamStore). The keys of a streamed
	// batch that have rows a claim delivers before any later event of
	// theirs: ready, claimed or parked. Each key is at most two probes,
	// of the key index and then of the blocked index. They are scalar
	// subqueries, not EXISTS: the planner may run an EXISTS as a hashed
	// subplan, which reads every claimed and parked row once per call.
	// First, once per call (an InitPlan, a one-time filter), two probes
	// say whether any row waits at all: while none does, as when nothing
	// failed, a batch of thousands of keys costs those two probes only.
	// Their ORDER BY is the indexes' order, so that the first entry of
	// each partial index answers, whatever the statistics guess of how
	// many rows match (a LIMIT 1 scan of the table could read it whole).
	keysWaitingSQL = `SELECT k.topic, k.key
	FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(topic, key, n)
	WHERE coalesce(
		(SELECT true FROM {{.Table}} o WHERE o.state = 'ready' ORDER BY o.topic, o.key, o.seq LIMIT 1),
		(SELECT true FROM {{.Table}} b WHERE b.state = 'claimed' OR b.parked ORDER BY b.topic, b.key LIMIT 1),
		false)
	  AND coalesce(
		(SELECT true FROM {{.Table}} o
		 WHERE o.state = 'ready' AND o.topic = k.topic AND o.key = k.key LIMIT 1),
		(SELECT true FROM {{.Table}} b
		 WHERE (b.state = 'claimed' OR b.parked) AND b.topic = k.topic AND b.key = k.key LIMIT 1),
		false)
	ORDER BY k.n`

	// Streamed events written back to the table, in one statement: each
	// event is inserted whole with the outcome the relay decided (ready
	// after a delay, or dead, parking its key or not) and the attempt
	// count it computed, or, when its streamed row is still there,
	// that row takes the outcome. A row no longer streamed (returned by
	// an earlier run whose batch was not confirmed, or changed by an
	// operator) is left as it is. The second part writes the outcome of
	// rows the source could not read into their streamed row, if it is
	// still there: it has no envelope to insert. {{.Conflict}} is the
	// primary key: id, or (id, created_at) on a partitioned table.
	//
	// available_at: after the delay the outcome asks for, and never
	// before the event's own (Message.AvailableAt; NULL when it has none,
	// which greatest ignores): an event the relay held because it was not
	// due yet waits in the table until it is.
	//
	// Seq: the seq given (the row's) keeps the event's place in its key
	// (the column is an identity BY DEFAULT). An event without one (0: a
	// logical decoding message written without a seq, which has no row)
	// takes a fresh one from the column's sequence, above every seq given
	// out before, and so does every later event of its key here, so that
	// the key's events keep the order given, which is their commit
	// order. The fresh seqs are drawn in that order: by the insert's
	// target list, as rows come out of a subquery sorted by n (OFFSET 0
	// keeps it a subquery).
	returnSQL = `WITH r AS (
		SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
		                     $8::bytea[], $9::text[], $10::timestamptz[], $11::int4[], $12::int8[],
		                     $13::boolean[], $14::boolean[], $15::int4[], $16::bigint[], $17::text[], $24::timestamptz[])
		     WITH ORDINALITY AS r(id, seq, topic, key, type, aggregate_type, aggregate_id,
		                          payload, headers, created_at, event_version, aggregate_version,
		                          dead, park, attempts, delay_us, err, available_at, n)
	), w AS (
		SELECT r.*, bool_or(r.seq <= 0) OVER (PARTITION BY r.topic, r.key ORDER BY r.n) AS fresh
		FROM r
	), u AS (
		SELECT * FROM unnest($18::uuid[], $19::boolean[], $20::boolean[], $21::int4[], $22::bigint[], $23::text[])
		     AS u(id, dead, park, attempts, delay_us, err)
	), back AS (
		INSERT INTO {{.Table}} AS o
		(id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers, created_at,
		 event_version, aggregate_version, state, attempts, available_at, dead_at, parked, last_error)
		SELECT s.id, CASE WHEN s.fresh THEN nextval(pg_get_serial_sequence('{{.Table}}', 'seq')::regclass) ELSE s.seq END,
		       s.topic, s.key, s.type, s.aggregate_type, s.aggregate_id, s.payload, s.headers::jsonb,
		       coalesce(s.created_at, now()), s.event_version, s.aggregate_version,
		       CASE WHEN s.dead THEN 'dead' ELSE 'ready' END, s.attempts,
		       greatest(now() + s.delay_us * interval '1 microsecond', s.available_at),
		       CASE WHEN s.dead THEN now() END, s.park, s.err
		FROM (SELECT * FROM w ORDER BY w.n OFFSET 0) s
		ON CONFLICT ({{.Conflict}}) DO UPDATE
		SET seq = EXCLUDED.seq, state = EXCLUDED.state, attempts = EXCLUDED.attempts, available_at = EXCLUDED.available_at,
		    dead_at = EXCLUDED.dead_at, parked = EXCLUDED.parked,
		    last_error = coalesce(EXCLUDED.last_error, o.last_error),
		    claim_token = NULL, lease_until = NULL, published_at = NULL
		WHERE o.state = 'streamed'
		RETURNING 1
	), unreadable AS (
		UPDATE {{.Table}} o
		SET state = CASE WHEN u.dead THEN 'dead' ELSE 'ready' END, attempts = u.attempts,
		    available_at = now() + u.delay_us * interval '1 microsecond',
		    dead_at = CASE WHEN u.dead THEN now() END, parked = u.park,
		    last_error = coalesce(u.err, o.last_error),
		    claim_token = NULL, lease_until = NULL, published_at = NULL
		FROM u
		WHERE o.id = u.id AND o.state = 'streamed'
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM back) + (SELECT count(*) FROM unreadable)`

	// What the state column defaults to: 'ready' (polling) or 'streamed'
	// (change-data-capture), as pg_get_expr prints it ('ready'::text).
	insertStateSQL = `SELECT pg_get_expr(ad.adbin, ad.adrelid)
	FROM pg_attribute a
	LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
	WHERE a.attrelid = $1::regclass AND a.attname = 'state' AND NOT a.attisdropped`
	// {{.State}} is 'ready' or 'streamed', a literal of the driver's.
	streamInsertsSQL = `ALTER TABLE {{.Table}} ALTER COLUMN state SET DEFAULT '{{.State}}'`

	// The backlog reads each state through its partial index: the ready,
	// claimed and dead rows, never the published ones. Ages are the
	// difference of two epochs, not of two timestamps: that is Infinity
	// for a row created at -infinity, where subtracting timestamps fails.
	backlogSQL = `SELECT topic, sum(ready)::bigint, sum(claimed)::bigint, sum(dead)::bigint, sum(parked)::bigint,
	       coalesce(extract(epoch FROM now()) - extract(epoch FROM min(oldest)), 0)::float8
	FROM (
		SELECT topic, count(*) AS ready, 0 AS claimed, 0 AS dead, 0 AS parked, min(created_at) AS oldest
		FROM {{.Table}} WHERE state = 'ready' GROUP BY topic
		UNION ALL
		SELECT topic, 0, count(*), 0, 0, min(created_at)
		FROM {{.Table}} WHERE state = 'claimed' GROUP BY topic
		UNION ALL
		SELECT topic, 0, 0, count(*), count(*) FILTER (WHERE parked), NULL
		FROM {{.Table}} WHERE state = 'dead' GROUP BY topic
		UNION ALL
		` + leasedBacklogSQL + `{{.DeadBacklog}}
	) b
	GROUP BY topic
	ORDER BY topic`

	// Pauses: the relay reads them all once a second (a handful of rows).
	pausesSQL = `SELECT kind, name, paused, reason, paused_by, paused_at, resumed_at
	FROM {{.Pauses}} ORDER BY kind, name`
	// Pausing what is paused already keeps its start and takes the new
	// reason; pausing again after a resume starts a new pause.
	pauseSQL = `INSERT INTO {{.Pauses}} AS p (kind, name, reason, paused_by) VALUES ($1, $2, $3, $4)
	ON CONFLICT (kind, name) DO UPDATE
	SET paused = true, reason = EXCLUDED.reason, paused_by = EXCLUDED.paused_by,
	    paused_at = CASE WHEN p.paused THEN p.paused_at ELSE now() END, resumed_at = NULL`
	resumeSQL = `UPDATE {{.Pauses}} SET paused = false, resumed_at = now()
	WHERE kind = $1 AND name = $2 AND paused`
	// The topics with ready events, one probe of the key index each: the
	// next topic after the last one found.
	readyTopicsSQL = `WITH RECURSIVE t(topic) AS (
		(SELECT o.topic FROM {{.Table}} o WHERE o.state = 'ready' ORDER BY o.topic LIMIT 1)
		UNION ALL
		SELECT (SELECT o.topic FROM {{.Table}} o WHERE o.state = 'ready' AND o.topic > t.topic
		        ORDER BY o.topic LIMIT 1)
		FROM t WHERE t.topic IS NOT NULL
	)
	SELECT topic FROM t WHERE topic IS NOT NULL`

	// Relays' heartbeats (herald.Heartbeats): a beat writes its relay's
	// row and deletes the rows of other relays that expired, in one
	// statement. Its times are durations in microseconds, turned into
	// times by the database clock; the start is kept from the row's
	// first beat unless the beat is the relay's first ($8).
	relayBeatSQL = `WITH expired AS (
		DELETE FROM {{.Relays}} WHERE expires_at < now() AND owner <> $1
	)
	INSERT INTO {{.Relays}} AS r (owner, version, started_at, heartbeat_at, expires_at, last_claim_at, leased, published)
	VALUES ($1, $2, now() - $3::bigint * interval '1 microsecond', now(), now() + $4::bigint * interval '1 microsecond',
	        CASE WHEN $5::bigint >= 0 THEN now() - $5::bigint * interval '1 microsecond' END, $6::bigint, $7::bigint)
	ON CONFLICT (owner) DO UPDATE
	SET version = EXCLUDED.version,
	    started_at = CASE WHEN $8::boolean THEN EXCLUDED.started_at ELSE r.started_at END,
	    heartbeat_at = EXCLUDED.heartbeat_at, expires_at = EXCLUDED.expires_at,
	    last_claim_at = EXCLUDED.last_claim_at, leased = EXCLUDED.leased, published = EXCLUDED.published`
	relayGoneSQL = `DELETE FROM {{.Relays}} WHERE owner = $1`
	// The relays listed are those whose row has not expired.
	relaysSQL = `SELECT owner, version, started_at, heartbeat_at, last_claim_at, leased, published
	FROM {{.Relays}} WHERE expires_at >= now() ORDER BY started_at, owner`

	statusSQL = `SELECT topic, state, count(*),
	       coalesce(extract(epoch FROM now()) - extract(epoch FROM min(created_at)), 0)::float8
	FROM {{.StatusRows}}
	GROUP BY topic, state
	ORDER BY topic, state`

	eventColumns = `id, seq, topic, key, type, aggregate_type, aggregate_id,
	event_version, coalesce(aggregate_version, 0), payload, headers,
	attempts, created_at, state, available_at, lease_until, coalesce(claimed_by, ''),
	published_at, dead_at, coalesce(last_error, ''), parked`
)

type queries struct {
	insertOne, insertMany, claim, walkKeys, claimKeys string
	// fair claims (Config.FairBy): empty without one
	fairValues, fairWalk                                                string
	deleteOne, deleteMany                                               string
	emitOne, emitMany                                                   string
	publish, complete, publishDelete, completeDelete                    string
	releaseClaim, rescue, deletePublished, status, blockedKeys, backlog string
	pauses, pause, resume, readyTopics                                  string
	relayBeat, relayGone, relays                                        string
	table                                                               string
	// The outbox's rows as operators see them: leased events claimed.
	events string

	// key leases (leases.go): the driver's claimKeys, publish,
	// publishDelete, complete, completeDelete and releaseClaim become
	// these. The publish forms return a count instead of changing rows
	// in silence.
	claimKeysLeased, publishLeased, publishDeleteLeased      string
	completeLeased, completeDeleteLeased, releaseClaimLeased string

	// Change-data-capture (stream.go). returnRows is returnPart on a
	// partitioned table, whose primary key is (id, created_at).
	keysWaiting, returnRows, returnPart, deleteStreamed string
	streamOn, streamOff, insertState                    string
	requeueStreamed, forgetSlot                         string

	// The same on a partitioned table, whose dead-letter table holds the
	// dead rows of dropped partitions: counted with the outbox's own.
	statusPart, backlogPart, dead string
}

func newQueries(n names) queries {
	return queries{
		insertOne:      n.render(insertOneSQL),
		insertMany:     n.render(insertManySQL),
		deleteOne:      n.render(deleteOneSQL),
		deleteMany:     n.render(deleteManySQL),
		emitOne:        n.Render(emitOneSQL, "{{.EventPrefix}}", n.eventPrefix()),
		emitMany:       n.Render(emitManySQL, "{{.EventPrefix}}", n.eventPrefix()),
		claim:          n.render(claimSQL),
		walkKeys:       n.render(walkKeysSQL),
		claimKeys:      n.render(claimKeysSQL),
		blockedKeys:    n.render(blockedKeysSQL),
		backlog:        n.Render(backlogSQL, "{{.DeadBacklog}}", ""),
		publish:        n.render(publishSQL),
		complete:       n.render(completeSQL),
		publishDelete:  n.render(publishDeleteSQL),
		completeDelete: n.render(completeDeleteSQL),
		releaseClaim:   n.render(releaseClaimSQL),
		// Each leased form runs in place of its plain one.
		claimKeysLeased:      n.render(strings.TrimSuffix(claimKeysSQL, claimKeysRowsSQL) + claimKeysLeaseSQL),
		publishLeased:        n.render(publishLeasedSQL),
		publishDeleteLeased:  n.render(publishDeleteLeasedSQL),
		completeLeased:       n.render(completeLeasedSQL),
		completeDeleteLeased: n.render(completeDeleteLeasedSQL),
		releaseClaimLeased:   n.render(releaseClaimLeasedSQL),
		rescue:               n.render(rescueSQL),
		deletePublished:      n.render(deletePublishedSQL),
		status:               n.Render(statusSQL, "{{.StatusRows}}", "("+n.render(statusRowsSQL)+") r"),
		events:               n.render(eventsViewSQL),
		pauses:               n.render(pausesSQL),
		pause:                n.render(pauseSQL),
		resume:               n.render(resumeSQL),
		readyTopics:          n.render(readyTopicsSQL),
		relayBeat:            n.render(relayBeatSQL),
		relayGone:            n.render(relayGoneSQL),
		relays:               n.render(relaysSQL),
		table:                n.Qualified,
		keysWaiting:          n.render(keysWaitingSQL),
		returnRows:           n.Render(returnSQL, "{{.Conflict}}", "id"),
		returnPart:           n.Render(returnSQL, "{{.Conflict}}", "id, created_at"),
		deleteStreamed:       n.render(deleteStreamedSQL),
		streamOn:             n.Render(streamInsertsSQL, "{{.State}}", stateStreamed),
		streamOff:            n.Render(streamInsertsSQL, "{{.State}}", stateReady),
		insertState:          insertStateSQL,
		requeueStreamed:      n.render(requeueStreamedSQL),
		forgetSlot:           n.render(forgetSlotSQL),
		statusPart: n.Render(statusSQL, "{{.StatusRows}}", `(`+n.render(statusRowsSQL)+
			` UNION ALL SELECT topic, 'dead', created_at FROM `+n.part().dead+`) r`),
		backlogPart: n.Render(backlogSQL, "{{.DeadBacklog}}", `
		UNION ALL
		SELECT topic, 0, 0, count(*), 0, NULL FROM `+n.part().dead+` GROUP BY topic`),
		dead: n.part().dead,
	}
}
