package heraldsqlite

// The driver's SQL. {{.Table}} is the quoted outbox table, filled in once per
// driver from a validated name; {{.Now}} is the database clock in integer
// microseconds. Durations travel as microseconds so that every timestamp is
// computed by the database clock.
//
// Lists of ids and batch outcomes travel as one JSON array parameter,
// unpacked by json_each: SQLite has no array type, and one parameter keeps
// each statement one prepared plan whatever the batch size.
//
// Every statement that changes rows is a single statement: SQLite runs it
// atomically under the database's write lock, which it takes before reading
// (a write statement outside BEGIN is an immediate transaction of its own).
// That is why the claim needs no SKIP LOCKED: no other writer can run
// between its SELECT and its UPDATE.

// rowBytes is what a row counts against a claim's byte bound: its payload
// and headers, in bytes (length counts a text's characters, so the headers
// are measured as a blob). rowBytesOf is the same of the row aliased o.
const (
	rowBytes   = `(length(payload) + coalesce(length(CAST(headers AS BLOB)), 0))`
	rowBytesOf = `(length(o.payload) + coalesce(length(CAST(o.headers AS BLOB)), 0))`
)

// nowMicros is the database clock in microseconds. 'now' has millisecond
// resolution and stays the same for every use within one statement; the
// rounding keeps the float's last bits out of the integer.
const nowMicros = `(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000)`

const (
	// One tuple per message; insertPrefix + n tuples is one statement.
	insertPrefixSQL = `INSERT INTO {{.Table}}
	(id, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at,
	 event_version, aggregate_version) VALUES `
	insertTupleSQL = `(?, ?, ?, ?, ?, ?, ?, ?, coalesce(?, {{.Now}}), ?, ?)`

	// The claim: the oldest ready rows by the ready index, marked in the
	// same statement, while the bytes of those before them are under ?5
	// (the relay's MaxInFlightBytes left). The lease ends by the database
	// clock. The attempt count stops at sqlstore.MaxAttempts, whatever
	// another program wrote in the column: past the integer maximum SQLite
	// would make it a REAL, which the column refuses, failing every claim.
	claimSQL = `UPDATE {{.Table}}
	SET state = 'claimed', claim_token = ?2, claimed_by = ?3,
	    lease_until = {{.Now}} + ?4, attempts = min(max(attempts, 0), 999999) + 1
	WHERE seq IN (
		SELECT seq FROM (
			SELECT seq, sum(size) OVER (ORDER BY available_at, seq ROWS UNBOUNDED PRECEDING) - size AS before
			FROM (
				SELECT seq, available_at, ` + rowBytes + ` AS size FROM {{.Table}}
				WHERE state = 'ready' AND available_at <= {{.Now}}
				ORDER BY available_at, seq
				LIMIT ?1))
		WHERE before < ?5
	)
	RETURNING id, seq, topic, key, type, aggregate_type, aggregate_id,
	          event_version, coalesce(aggregate_version, 0), payload, headers, attempts, created_at`

	// An ordered claim runs these in one transaction, which SQLite runs
	// alone: no other writer can claim between them. nextKeySQL walks the
	// keys with ready events in (topic, key) order; a key is taken when
	// none of its events is claimed or parked (keyBlockedSQL); keyRunSQL
	// lists its lowest ready events, of which the claim takes those before
	// the first not yet available (none when the lowest is not). An unordered key takes its lowest available events
	// (keyAvailableSQL). claimSeqsSQL then marks the chosen rows.
	nextKeySQL = `SELECT topic, key FROM {{.Table}}
	WHERE state = 'ready' AND (topic, key) > (?1, ?2)
	ORDER BY topic, key LIMIT 1`
	// A key of a paused topic is never taken, and the walk's next probe
	// passes the rest of its topic: one probe however many keys wait in
	// it. ReadyTopics walks the topics with the same probe.
	nextTopicSQL = `SELECT topic, key FROM {{.Table}}
	WHERE state = 'ready' AND topic > ?1
	ORDER BY topic, key LIMIT 1`
	keyBlockedSQL = `SELECT EXISTS (SELECT 1 FROM {{.Table}}
	WHERE (state = 'claimed' OR parked = 1) AND topic = ?1 AND key = ?2)`
	keyRunSQL = `SELECT seq, available_at <= {{.Now}} FROM {{.Table}}
	WHERE state = 'ready' AND topic = ?1 AND key = ?2
	ORDER BY seq LIMIT ?3`
	keyAvailableSQL = `SELECT seq, true FROM {{.Table}}
	WHERE state = 'ready' AND topic = ?1 AND key = ?2 AND available_at <= {{.Now}}
	ORDER BY seq LIMIT ?3`
	// Inside the write transaction, over the candidate keys (?1, a JSON
	// array of [topic, key, unordered]): which are blocked, and the lowest
	// ready events of each (available ones only for an unordered key), at
	// most ?2 per key, in key then seq order.
	blockedKeysOfSQL = `SELECT k.key FROM json_each(?1) k
	WHERE EXISTS (SELECT 1 FROM {{.Table}} b
	              WHERE (b.state = 'claimed' OR b.parked = 1)
	                AND b.topic = json_extract(k.value, '$[0]') AND b.key = json_extract(k.value, '$[1]'))`
	runsOfSQL = `SELECT k.key, o.seq, o.available_at <= {{.Now}}, ` + rowBytesOf + `
	FROM json_each(?1) k
	JOIN {{.Table}} o ON o.seq IN (
		SELECT s.seq FROM {{.Table}} s
		WHERE s.state = 'ready' AND s.topic = json_extract(k.value, '$[0]') AND s.key = json_extract(k.value, '$[1]')
		  AND (NOT json_extract(k.value, '$[2]') OR s.available_at <= {{.Now}})
		ORDER BY s.seq LIMIT ?2)
	ORDER BY k.key, o.seq`
	claimSeqsSQL = `UPDATE {{.Table}}
	SET state = 'claimed', claim_token = ?2, claimed_by = ?3,
	    lease_until = {{.Now}} + ?4, attempts = min(max(attempts, 0), 999999) + 1
	WHERE seq IN (SELECT value FROM json_each(?1)) AND state = 'ready'
	RETURNING id, seq, topic, key, type, aggregate_type, aggregate_id,
	          event_version, coalesce(aggregate_version, 0), payload, headers, attempts, created_at`

	// Parked keys: one row per dead event that parks its key, with the
	// number of ready events waiting behind it.
	blockedKeysSQL = `SELECT d.topic, d.key, d.id, d.dead_at,
	       (SELECT count(*) FROM {{.Table}} w WHERE w.state = 'ready' AND w.topic = d.topic AND w.key = d.key)
	FROM {{.Table}} d`
	blockedKeysWhereSQL = ` AND d.parked = 1`
	// waitingBehindSQL keeps the parked keys with events waiting behind
	// their dead event: only those need Resume to be discarded.
	waitingBehindSQL    = ` AND EXISTS (SELECT 1 FROM {{.Table}} w WHERE w.state = 'ready' AND w.topic = d.topic AND w.key = d.key)`
	blockedKeysOrderSQL = ` ORDER BY d.dead_at, d.seq LIMIT ?`

	// Acknowledgement when every event of a batch was confirmed: the
	// common case, kept to one JSON array of ids.
	publishSQL = `UPDATE {{.Table}}
	SET state = 'published', published_at = {{.Now}}, claim_token = NULL, lease_until = NULL
	WHERE id IN (SELECT value FROM json_each(?1)) AND claim_token = ?2 AND state = 'claimed'`

	// With CompleteParams.Delete, the confirmed rows are deleted instead,
	// leaving nothing for retention.
	publishDeleteSQL = `DELETE FROM {{.Table}}
	WHERE id IN (SELECT value FROM json_each(?1)) AND claim_token = ?2 AND state = 'claimed'`

	// Acknowledgement of a batch with failures, still one statement. ?1 is
	// a JSON array of [id, published, dead, park, refund, delay_us, error
	// or null]: the relay decided each row's outcome, the statement only
	// writes it. SET expressions see the row as it was before the update.
	// The rows are found by id, one probe per outcome: the unary + keeps
	// the state test from choosing the blocked index, which after ANALYZE
	// with few rows claimed was planned as a scan of every row claimed or
	// parked with the batch's JSON read again for each
	// (TestRelayStatementsAreIndexProbesWhateverTheStatistics).
	completeSQL = `WITH f AS (
		SELECT json_extract(value, '$[0]') AS fid,
		       json_extract(value, '$[1]') AS ok,
		       json_extract(value, '$[2]') AS dead,
		       json_extract(value, '$[3]') AS park,
		       json_extract(value, '$[4]') AS refund,
		       json_extract(value, '$[5]') AS delay_us,
		       json_extract(value, '$[6]') AS err
		FROM json_each(?1)
	)
	UPDATE {{.Table}} AS o
	SET state = CASE WHEN f.ok THEN 'published' WHEN f.dead THEN 'dead' ELSE 'ready' END,
	    published_at = CASE WHEN f.ok THEN {{.Now}} END,
	    dead_at = CASE WHEN f.dead THEN {{.Now}} END,
	    parked = CASE WHEN f.park THEN 1 ELSE 0 END,
	    available_at = CASE WHEN f.ok OR f.dead THEN o.available_at ELSE {{.Now}} + f.delay_us END,
	    attempts = CASE WHEN f.refund THEN max(o.attempts, 1) - 1 ELSE o.attempts END,
	    last_error = coalesce(f.err, o.last_error),
	    claim_token = NULL, lease_until = NULL
	FROM f
	WHERE o.id = f.fid AND o.claim_token = ?2 AND +o.state = 'claimed'
	RETURNING id, state`

	// A claim whose answer was lost: its rows, if it committed, go back at
	// once.
	releaseClaimSQL = `UPDATE {{.Table}}
	SET state = 'ready', attempts = max(attempts, 1) - 1, claim_token = NULL, lease_until = NULL
	WHERE state = 'claimed' AND claim_token = ?1`

	// Rows whose lease ran out belong to a relay that died or stalled. A
	// claimed row with no lease, or one that is not an integer (text
	// sorts after every number, so it would never run out), was not
	// claimed by a relay: it is rescued too, or its key would wait forever.
	rescueSQL = `UPDATE {{.Table}}
	SET state = 'ready', claim_token = NULL, lease_until = NULL,
	    last_error = 'lease expired: relay ' || coalesce(claimed_by, 'unknown') || ' did not acknowledge in time'
	WHERE seq IN (
		SELECT seq FROM {{.Table}}
		WHERE state = 'claimed' AND (lease_until < {{.Now}} OR typeof(lease_until) <> 'integer')
		ORDER BY lease_until
		LIMIT ?1
	)`

	// Retention in small batches: each statement holds the write lock for
	// at most ?2 rows.
	deletePublishedSQL = `DELETE FROM {{.Table}}
	WHERE seq IN (
		SELECT seq FROM {{.Table}}
		WHERE state = 'published' AND published_at < {{.Now}} - ?1
		ORDER BY published_at
		LIMIT ?2
	)`

	// The backlog reads each state through its partial index: the ready,
	// claimed and dead rows, never the published ones. An age past the
	// integer range (a created_at near its minimum) comes out a REAL:
	// ages are read as floats.
	backlogSQL = `SELECT topic, sum(ready), sum(claimed), sum(dead), sum(parked),
	       coalesce(max({{.Now}} - min(oldest), 0), 0)
	FROM (
		SELECT topic, count(*) AS ready, 0 AS claimed, 0 AS dead, 0 AS parked, min(created_at) AS oldest
		FROM {{.Table}} WHERE state = 'ready' GROUP BY topic
		UNION ALL
		SELECT topic, 0, count(*), 0, 0, min(created_at)
		FROM {{.Table}} WHERE state = 'claimed' GROUP BY topic
		UNION ALL
		SELECT topic, 0, 0, count(*), sum(parked), NULL
		FROM {{.Table}} WHERE state = 'dead' GROUP BY topic
	)
	GROUP BY topic
	ORDER BY topic`

	// Pauses: the relay reads them all once a second (a handful of rows).
	pausesSQL = `SELECT kind, name, paused, reason, paused_by, paused_at, resumed_at
	FROM {{.Pauses}} ORDER BY kind, name`
	// Pausing what is paused already keeps its start and takes the new
	// reason; pausing again after a resume starts a new pause.
	pauseSQL = `INSERT INTO {{.Pauses}} AS p (kind, name, reason, paused_by) VALUES (?1, ?2, ?3, ?4)
	ON CONFLICT (kind, name) DO UPDATE
	SET paused = 1, reason = excluded.reason, paused_by = excluded.paused_by,
	    paused_at = CASE WHEN p.paused THEN p.paused_at ELSE {{.Now}} END, resumed_at = NULL`
	resumeSQL = `UPDATE {{.Pauses}} SET paused = 0, resumed_at = {{.Now}}
	WHERE kind = ?1 AND name = ?2 AND paused`

	// Relays' heartbeats (herald.Heartbeats): a beat deletes the rows of
	// other relays that expired, then writes its relay's row. Its times
	// are durations in microseconds, turned into times by the database
	// clock; the start is kept from the row's first beat unless the beat
	// is the relay's first (?8).
	relayPruneSQL = `DELETE FROM {{.Relays}} WHERE expires_at < {{.Now}} AND owner <> ?1`
	relayBeatSQL  = `INSERT INTO {{.Relays}} AS r (owner, version, started_at, heartbeat_at, expires_at, last_claim_at, leased, published)
	VALUES (?1, ?2, {{.Now}} - ?3, {{.Now}}, {{.Now}} + ?4, CASE WHEN ?5 >= 0 THEN {{.Now}} - ?5 END, ?6, ?7)
	ON CONFLICT (owner) DO UPDATE
	SET version = excluded.version,
	    started_at = CASE WHEN ?8 THEN excluded.started_at ELSE r.started_at END,
	    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at,
	    last_claim_at = excluded.last_claim_at, leased = excluded.leased, published = excluded.published`
	relayGoneSQL = `DELETE FROM {{.Relays}} WHERE owner = ?1`
	// The relays listed are those whose row has not expired.
	relaysSQL = `SELECT owner, version, started_at, heartbeat_at, last_claim_at, leased, published
	FROM {{.Relays}} WHERE expires_at >= {{.Now}} ORDER BY started_at, owner`

	statusSQL = `SELECT topic, state, count(*), max({{.Now}} - min(created_at), 0)
	FROM {{.Table}}
	GROUP BY topic, state
	ORDER BY topic, state`

	eventColumns = `id, seq, topic, key, type, aggregate_type, aggregate_id,
	event_version, coalesce(aggregate_version, 0), payload, headers,
	attempts, created_at, state, available_at, lease_until, coalesce(claimed_by, ''),
	published_at, dead_at, coalesce(last_error, ''), parked`

	// The admin's row selections, with positional parameters so that the
	// listing's limit simply follows them: the state, then the ids (a JSON
	// array) or the topic.
	whereAllSQL   = ` WHERE state = ?`
	whereIDsSQL   = ` WHERE state = ? AND id IN (SELECT value FROM json_each(?))`
	whereTopicSQL = ` WHERE state = ? AND topic = ?`

	getEventSQL   = `SELECT ` + eventColumns + ` FROM {{.Table}} WHERE id = ?1`
	listEventsSQL = `SELECT ` + eventColumns + ` FROM {{.Table}}`
	listOrderSQL  = ` ORDER BY seq LIMIT ?`
	requeueSQL    = `UPDATE {{.Table}}
	SET state = 'ready', attempts = 0, available_at = {{.Now}}, dead_at = NULL, parked = 0`
	discardSQL = `DELETE FROM {{.Table}}`
)

type queries struct {
	insertPrefix, insertTuple                                                              string
	claim, publish, publishDelete, complete, releaseClaim, rescue, deletePublished, status string
	nextKey, keyBlocked, keyRun, keyAvailable, claimSeqs, blockedKeys                      string
	waitingBehind                                                                          string
	blockedKeysOf, runsOf                                                                  string
	getEvent, listEvents, requeue, discard, backlog                                        string
	nextTopic, pauses, pause, resume                                                       string
	relayPrune, relayBeat, relayGone, relays                                               string
}

func newQueries(n names) queries {
	return queries{
		insertPrefix:    n.render(insertPrefixSQL),
		insertTuple:     n.render(insertTupleSQL),
		claim:           n.render(claimSQL),
		nextKey:         n.render(nextKeySQL),
		nextTopic:       n.render(nextTopicSQL),
		pauses:          n.render(pausesSQL),
		pause:           n.render(pauseSQL),
		resume:          n.render(resumeSQL),
		relayPrune:      n.render(relayPruneSQL),
		relayBeat:       n.render(relayBeatSQL),
		relayGone:       n.render(relayGoneSQL),
		relays:          n.render(relaysSQL),
		keyAvailable:    n.render(keyAvailableSQL),
		keyBlocked:      n.render(keyBlockedSQL),
		keyRun:          n.render(keyRunSQL),
		claimSeqs:       n.render(claimSeqsSQL),
		blockedKeysOf:   n.render(blockedKeysOfSQL),
		runsOf:          n.render(runsOfSQL),
		blockedKeys:     n.render(blockedKeysSQL),
		waitingBehind:   n.render(waitingBehindSQL),
		backlog:         n.render(backlogSQL),
		publish:         n.render(publishSQL),
		publishDelete:   n.render(publishDeleteSQL),
		complete:        n.render(completeSQL),
		releaseClaim:    n.render(releaseClaimSQL),
		rescue:          n.render(rescueSQL),
		deletePublished: n.render(deletePublishedSQL),
		status:          n.render(statusSQL),
		getEvent:        n.render(getEventSQL),
		listEvents:      n.render(listEventsSQL),
		requeue:         n.render(requeueSQL),
		discard:         n.render(discardSQL),
	}
}
