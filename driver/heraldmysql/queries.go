package heraldmysql

// The driver's SQL. {{.Table}} is the quoted outbox table, {{.Name}} its
// bare name (for index names), filled in once per driver from validated
// names. Durations travel as microseconds and every timestamp is computed
// by the database clock, in UTC.
//
// MySQL's placeholders are positional: each ? takes the next argument.
// Lists (ids, sequence numbers, batch outcomes) travel as one JSON array
// parameter unpacked by JSON_TABLE, joined to the outbox table rather than
// used in an IN (subquery): MariaDB runs an UPDATE's or DELETE's IN
// (subquery) as a dependent subquery over every row, where the join is a
// primary or unique key lookup per element. A JSON_TABLE column compared
// with an indexed column declares the column's character set and
// collation, or the comparison converts the indexed side and cannot use
// its index.
//
// The reserved word key is quoted everywhere.

// rowBytes is what a row counts against a claim's byte bound: its payload
// and headers, in bytes.
const rowBytes = `(LENGTH(payload) + LENGTH(headers))`

// The JSON_TABLEs that unpack the lists, each joined to the outbox table
// (aliased o) as the first table of a STRAIGHT_JOIN, with the key index
// forced: whatever the optimizer estimates (a small table looks cheaper to
// scan), each element is one primary or unique key lookup, which locks
// that row only. A scan would lock, or wait for, every row it passes.
// The lists are sequence numbers, ids, and a batch's outcomes ([id,
// published, dead, park, refund, delay_us, has_error, error], numbers for
// the booleans).
const (
	idListSQL  = `JSON_TABLE(?, '$[*]' COLUMNS (i CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) j`
	seqJoinSQL = `JSON_TABLE(?, '$[*]' COLUMNS (s BIGINT PATH '$')) j
	STRAIGHT_JOIN {{.Table}} o FORCE INDEX (PRIMARY) ON o.seq = j.s`
	idJoinSQL = idListSQL + `
	STRAIGHT_JOIN {{.Table}} o FORCE INDEX ({{.Name}}_id_idx) ON o.id = j.i`
	outcomeJoinSQL = `JSON_TABLE(?, '$[*]' COLUMNS (
		i        CHAR(36) CHARACTER SET ascii COLLATE ascii_bin PATH '$[0]',
		ok       INT        PATH '$[1]',
		dead     INT        PATH '$[2]',
		park     INT        PATH '$[3]',
		refund   INT        PATH '$[4]',
		delay_us BIGINT     PATH '$[5]',
		has_err  INT        PATH '$[6]',
		err      MEDIUMTEXT PATH '$[7]')) f
	STRAIGHT_JOIN {{.Table}} o FORCE INDEX ({{.Name}}_id_idx) ON o.id = f.i`
)

const (
	// One tuple per message; insertPrefix + n tuples is one statement.
	insertPrefixSQL = "INSERT INTO {{.Table}}\n\t(id, topic, `key`, type, aggregate_type, aggregate_id, payload, headers, available_at,\n" +
		"\t event_version, aggregate_version) VALUES "
	insertTupleSQL = `(?, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, UTC_TIMESTAMP(6)), ?, ?)`

	// The unordered claim, in a READ COMMITTED transaction: the oldest
	// available rows by the ready index, locked, skipping rows another
	// transaction holds (another claim's, or a producer's not yet
	// committed). The byte bound is applied to what this returns, in Go.
	claimReadySQL = `SELECT seq, ` + rowBytes + ` FROM {{.Table}} FORCE INDEX ({{.Name}}_ready_idx)
	WHERE state = 'ready' AND available_at <= UTC_TIMESTAMP(6)
	ORDER BY available_at, seq
	LIMIT ?
	FOR UPDATE SKIP LOCKED`

	// Marks the rows a claim chose (and holds locked) as claimed: ?1 the
	// JSON array of their seqs, then token, owner, lease in microseconds.
	// The lease ends by the database clock. The attempt count stops at
	// sqlstore.MaxAttempts, whatever another program wrote in the column.
	// MySQL runs an UPDATE's assignments left to right, each seeing those
	// before it: no assignment here reads a column another one sets.
	markClaimedSQL = `UPDATE ` + seqJoinSQL + `
	SET o.claim_token = ?, o.claimed_by = ?, o.lease_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
	    o.attempts = LEAST(GREATEST(o.attempts, 0), 999999) + 1, o.state = 'claimed'
	WHERE o.state = 'ready'`

	// Reads what a claim committed, after the commit: the rows it marked
	// and still holds by its token.
	claimedRowsSQL = "SELECT o.id, o.seq, o.topic, o.`key`, o.type, o.aggregate_type, o.aggregate_id,\n" +
		"\to.event_version, COALESCE(o.aggregate_version, 0), o.payload, o.headers, o.attempts, o.created_at\n" +
		"\tFROM " + seqJoinSQL + "\n" +
		"\tWHERE o.claim_token = ? AND o.state = 'claimed'"

	// An ordered claim walks the keys with ready rows from a cursor
	// (topic, key) in batches: walkKeysSQL returns up to ? keys after the
	// cursor, found by a loose scan of the key index (one index dive per
	// key, however many events each holds), with what decides whether
	// the key may be taken (an event of it claimed or parked, and whether
	// its lowest ready event is available) and how many ready events it
	// has, counted up to the claim's bound per key. The topics a claim
	// passes (paused ones) are cut out of the scan's range by
	// walkPausedSQL, one ? per topic: a paused topic costs nothing
	// however many keys wait in it. The walk does not lock; the claim
	// decides again after locking (see claimOrdered). The first ? is the
	// bound per key less one.
	walkKeysSQL = "SELECT x.topic, x.`key`,\n" +
		"\t  EXISTS (SELECT 1 FROM {{.Table}} b FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t          WHERE b.state = 'claimed' AND b.topic = x.topic AND b.`key` = x.`key`)\n" +
		"\t  OR EXISTS (SELECT 1 FROM {{.Table}} b FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t             WHERE b.state = 'dead' AND b.parked AND b.topic = x.topic AND b.`key` = x.`key`),\n" +
		"\t  COALESCE((SELECT h.available_at <= UTC_TIMESTAMP(6) FROM {{.Table}} h FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t            WHERE h.state = 'ready' AND h.topic = x.topic AND h.`key` = x.`key` ORDER BY h.seq LIMIT 1), FALSE),\n" +
		"\t  (SELECT COUNT(*) FROM {{.Table}} c FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t   WHERE c.state = 'ready' AND c.topic = x.topic AND c.`key` = x.`key`\n" +
		"\t     AND c.seq <= COALESCE((SELECT s.seq FROM {{.Table}} s FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t                            WHERE s.state = 'ready' AND s.topic = x.topic AND s.`key` = x.`key`\n" +
		"\t                            ORDER BY s.seq LIMIT 1 OFFSET ?), 9223372036854775807))\n" +
		"\tFROM (SELECT topic, `key` FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t      WHERE state = 'ready' AND (topic > ? OR (topic = ? AND `key` > ?))"
	walkPausedSQL  = " AND topic NOT IN (%s)"
	walkKeysEndSQL = "\n\t      GROUP BY state, topic, `key` ORDER BY state, topic, `key` LIMIT ?) x\n" +
		"\tORDER BY x.topic, x.`key`"

	// The topics with ready events, one probe of the key index each: the
	// first topic after the last one found.
	nextTopicSQL = `SELECT topic FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)
	WHERE state = 'ready' AND topic > ?
	ORDER BY topic LIMIT 1`

	// Locking and checking many keys in one statement. The keys travel
	// as one JSON array ([index, topic, key, free], topic and key in hex:
	// they are bytes, which JSON's strings are not) joined to the key
	// index, one ref lookup per key that reads every ready row of the
	// key: for the keys whose ready rows a claim wants all of (the walk
	// counted fewer than the bound per key). A key with more ready rows
	// than the claim wants takes a part of its own with a LIMIT
	// (keyRunSQL), so that a hot key's backlog is never read whole. MySQL
	// optimizes each part of a UNION on its own, which costs far more than
	// the part's few index reads: the parts are kept for the keys that
	// need them.
	keysJSONSQL = `JSON_TABLE(?, '$[*]' COLUMNS (
		i    INT PATH '$[0]',
		t    VARCHAR(510) CHARACTER SET ascii COLLATE ascii_bin PATH '$[1]',
		k    VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin PATH '$[2]',
		free INT PATH '$[3]')) k`
	keysJoinSQL = keysJSONSQL + `
	STRAIGHT_JOIN {{.Table}} o FORCE INDEX ({{.Name}}_key_idx)
	  ON o.state = 'ready' AND o.topic = UNHEX(k.t) AND o.` + "`key`" + ` = UNHEX(k.k)`

	// The keys' ready rows, locked, skipping rows another transaction
	// holds; of a free key (the empty key, an unordered topic) only the
	// available ones.
	lockKeysSQL = `SELECT k.i, o.seq, o.available_at <= UTC_TIMESTAMP(6), ` + rowBytes + `
	FROM ` + keysJoinSQL + `
	WHERE k.free = 0 OR o.available_at <= UTC_TIMESTAMP(6)
	FOR UPDATE SKIP LOCKED`

	// A key's lowest ready rows, locked, skipping rows another transaction
	// holds; for a free key its lowest available ones. Each part starts
	// with the key's index in the claim.
	keyRunSQL = "(SELECT ?, seq, available_at <= UTC_TIMESTAMP(6), " + rowBytes + "\n" +
		"\t FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t WHERE state = 'ready' AND topic = ? AND `key` = ?\n" +
		"\t ORDER BY seq LIMIT ?\n" +
		"\t FOR UPDATE SKIP LOCKED)"
	keyAvailableSQL = "(SELECT ?, seq, TRUE, " + rowBytes + "\n" +
		"\t FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t WHERE state = 'ready' AND topic = ? AND `key` = ? AND available_at <= UTC_TIMESTAMP(6)\n" +
		"\t ORDER BY seq LIMIT ?\n" +
		"\t FOR UPDATE SKIP LOCKED)"

	// The check after locking, one statement, not locking: the keys'
	// lowest ready rows as committed now (every ready row of the keys of
	// checkRowsSQL, the lowest few of a keyCheckSQL part's key), and -1
	// for each key with an event claimed or parked (checkBlockedSQL).
	// Each row starts with the key's index in the claim.
	checkRowsSQL    = `(SELECT k.i, o.seq FROM ` + keysJoinSQL + `)`
	checkBlockedSQL = "(SELECT k.i, -1 FROM " + keysJSONSQL + "\n" +
		"\t WHERE EXISTS (SELECT 1 FROM {{.Table}} b FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t               WHERE b.state = 'claimed' AND b.topic = UNHEX(k.t) AND b.`key` = UNHEX(k.k))\n" +
		"\t    OR EXISTS (SELECT 1 FROM {{.Table}} b FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t               WHERE b.state = 'dead' AND b.parked AND b.topic = UNHEX(k.t) AND b.`key` = UNHEX(k.k)))"
	keyCheckSQL = "(SELECT ?, seq FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)\n" +
		"\t WHERE state = 'ready' AND topic = ? AND `key` = ? ORDER BY seq LIMIT ?)"

	// Acknowledgement when every event of a batch was confirmed: the
	// common case, one statement outside any transaction. Each id is a
	// unique-key lookup, which locks that row only.
	publishSQL = `UPDATE ` + idJoinSQL + `
	SET o.published_at = UTC_TIMESTAMP(6), o.claim_token = NULL, o.lease_until = NULL, o.state = 'published'
	WHERE o.claim_token = ? AND o.state = 'claimed'`

	// With CompleteParams.Delete, the confirmed rows are deleted instead.
	publishDeleteSQL = `DELETE o FROM ` + idJoinSQL + `
	WHERE o.claim_token = ? AND o.state = 'claimed'`

	// A batch with failures is acknowledged in a transaction: heldSQL
	// locks the rows the token still holds (MySQL's UPDATE returns no
	// rows, and the result must say which changed), then completeSQL
	// writes each row's outcome as the relay decided it. The state is
	// assigned last: MySQL's assignments see those before them, and none
	// here reads the state.
	heldSQL = `SELECT o.id FROM ` + idJoinSQL + `
	WHERE o.claim_token = ? AND o.state = 'claimed'
	FOR UPDATE`
	completeSQL = `UPDATE ` + outcomeJoinSQL + `
	SET o.published_at = IF(f.ok, UTC_TIMESTAMP(6), NULL),
	    o.dead_at = IF(f.dead, UTC_TIMESTAMP(6), NULL),
	    o.parked = f.park <> 0,
	    o.available_at = IF(f.ok OR f.dead, o.available_at, UTC_TIMESTAMP(6) + INTERVAL f.delay_us MICROSECOND),
	    o.attempts = IF(f.refund, GREATEST(o.attempts, 1) - 1, o.attempts),
	    o.last_error = IF(f.has_err, f.err, o.last_error),
	    o.claim_token = NULL, o.lease_until = NULL,
	    o.state = CASE WHEN f.ok THEN 'published' WHEN f.dead THEN 'dead' ELSE 'ready' END
	WHERE o.claim_token = ? AND o.state = 'claimed'`

	// A claim whose answer was lost: its rows, if it committed, go back at
	// once. claimedBySQL finds them among the claimed rows, few and read
	// through the key index, without locking; releaseClaimSQL changes
	// them by seq, checking the token again on each.
	claimedBySQL = `SELECT seq FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)
	WHERE state = 'claimed' AND claim_token = ?`
	releaseClaimSQL = `UPDATE ` + seqJoinSQL + `
	SET o.attempts = GREATEST(o.attempts, 1) - 1, o.claim_token = NULL, o.lease_until = NULL, o.state = 'ready'
	WHERE o.state = 'claimed' AND o.claim_token = ?`

	// Rows whose lease ran out belong to a relay that died or stalled:
	// expiredSQL finds them, without locking, and rescueSQL makes them
	// ready, checking again that each lease is over. A claimed row with no
	// lease was not claimed by a relay: it is rescued too, or its key
	// would wait forever.
	expiredSQL = `SELECT seq FROM {{.Table}} FORCE INDEX ({{.Name}}_key_idx)
	WHERE state = 'claimed' AND ` + leaseOverSQL + `
	ORDER BY lease_until
	LIMIT ?`
	rescueSQL = `UPDATE ` + seqJoinSQL + `
	SET o.last_error = CONCAT('lease expired: relay ', COALESCE(o.claimed_by, 'unknown'), ' did not acknowledge in time'),
	    o.claim_token = NULL, o.lease_until = NULL, o.state = 'ready'
	WHERE o.state = 'claimed' AND ` + leaseOverOfSQL
	leaseOverSQL   = `(lease_until < UTC_TIMESTAMP(6) OR lease_until IS NULL)`
	leaseOverOfSQL = `(o.lease_until < UTC_TIMESTAMP(6) OR o.lease_until IS NULL)`

	// Retention in small batches, oldest first, by the published index.
	deletePublishedSQL = `DELETE FROM {{.Table}}
	WHERE state = 'published' AND published_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
	ORDER BY published_at
	LIMIT ?`

	// The backlog reads each state through an index led by the state:
	// the ready, claimed and dead rows, never the published ones. Ages are
	// microseconds.
	backlogSQL = `SELECT topic, SUM(ready), SUM(claimed), SUM(dead), SUM(parked),
	       COALESCE(GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(oldest), UTC_TIMESTAMP(6)), 0), 0)
	FROM (
		SELECT topic, COUNT(*) AS ready, 0 AS claimed, 0 AS dead, 0 AS parked, MIN(created_at) AS oldest
		FROM {{.Table}} WHERE state = 'ready' GROUP BY topic
		UNION ALL
		SELECT topic, 0, COUNT(*), 0, 0, MIN(created_at)
		FROM {{.Table}} WHERE state = 'claimed' GROUP BY topic
		UNION ALL
		SELECT topic, 0, 0, COUNT(*), SUM(parked), NULL
		FROM {{.Table}} WHERE state = 'dead' GROUP BY topic
	) b
	GROUP BY topic
	ORDER BY topic`

	statusSQL = `SELECT topic, state, COUNT(*),
	       COALESCE(GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(created_at), UTC_TIMESTAMP(6)), 0), 0)
	FROM {{.Table}}
	GROUP BY topic, state
	ORDER BY topic, state`

	// Pauses: the relay reads them all once a second (a handful of rows).
	pausesSQL = `SELECT kind, name, paused, reason, paused_by, paused_at, resumed_at
	FROM {{.Pauses}} ORDER BY kind, name`
	// Pausing what is paused already keeps its start and takes the new
	// reason; pausing again after a resume starts a new pause. paused is
	// assigned last: paused_at reads it as it was.
	pauseSQL = `INSERT INTO {{.Pauses}} (kind, name, reason, paused_by) VALUES (?, ?, ?, ?)
	ON DUPLICATE KEY UPDATE
	    paused_at = IF(paused, paused_at, UTC_TIMESTAMP(6)), reason = VALUES(reason),
	    paused_by = VALUES(paused_by), resumed_at = NULL, paused = TRUE`
	resumeSQL = `UPDATE {{.Pauses}} SET resumed_at = UTC_TIMESTAMP(6), paused = FALSE
	WHERE kind = ? AND name = ? AND paused`

	// Relays' heartbeats (herald.Heartbeats): a beat deletes the rows of
	// other relays that expired, then writes its relay's row. Its times
	// are durations in microseconds, turned into times by the database
	// clock (UTC_TIMESTAMP is the statement's start throughout a
	// statement); the start is kept from the row's first beat unless the
	// beat is the relay's first (the last parameter).
	relayPruneSQL = `DELETE FROM {{.Relays}} WHERE expires_at < UTC_TIMESTAMP(6) AND owner <> ?`
	relayBeatSQL  = `INSERT INTO {{.Relays}} (owner, version, started_at, heartbeat_at, expires_at, last_claim_at, leased, published)
	VALUES (?, ?, UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
	        UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND, ?, ?)
	ON DUPLICATE KEY UPDATE
	    version = VALUES(version), started_at = IF(?, VALUES(started_at), started_at),
	    heartbeat_at = VALUES(heartbeat_at), expires_at = VALUES(expires_at),
	    last_claim_at = VALUES(last_claim_at), leased = VALUES(leased), published = VALUES(published)`
	relayGoneSQL = `DELETE FROM {{.Relays}} WHERE owner = ?`
	// The relays listed are those whose row has not expired.
	relaysSQL = `SELECT owner, version, started_at, heartbeat_at, last_claim_at, leased, published
	FROM {{.Relays}} WHERE expires_at >= UTC_TIMESTAMP(6) ORDER BY started_at, owner`

	eventColumns = "id, seq, topic, `key`, type, aggregate_type, aggregate_id,\n" +
		"\tevent_version, COALESCE(aggregate_version, 0), payload, headers,\n" +
		"\tattempts, created_at, state, available_at, lease_until, COALESCE(claimed_by, ''),\n" +
		"\tpublished_at, dead_at, COALESCE(last_error, ''), parked"

	getEventSQL = `SELECT ` + eventColumns + ` FROM {{.Table}} WHERE id = ?`

	// Parked keys: one row per dead event that parks its key, with the
	// number of ready events waiting behind it. The selection is a
	// fromIDs or fromTable FROM clause and its WHERE.
	blockedKeysSQL = "SELECT o.topic, o.`key`, o.id, o.dead_at,\n" +
		"\t(SELECT COUNT(*) FROM {{.Table}} w WHERE w.state = 'ready' AND w.topic = o.topic AND w.`key` = o.`key`)\n" +
		"\tFROM "
	blockedKeysOrderSQL = ` AND o.parked ORDER BY o.dead_at, o.seq LIMIT ?`
	// waitingBehindSQL keeps the parked keys with events waiting behind
	// their dead event: only those need Resume to be discarded.
	waitingBehindSQL = " AND EXISTS (SELECT 1 FROM {{.Table}} w WHERE w.state = 'ready' AND w.topic = o.topic AND w.`key` = o.`key`)"

	// The admin's row selections: FROM the table, or the table joined to
	// a JSON array of ids; always aliased o.
	fromTableSQL = `{{.Table}} o`
	fromIDsSQL   = idJoinSQL

	requeueSetSQL = ` SET o.attempts = 0, o.available_at = UTC_TIMESTAMP(6), o.dead_at = NULL, o.parked = FALSE, o.state = 'ready'`
)

type queries struct {
	insertPrefix, insertTuple                      string
	claimReady, markClaimed, claimedRows           string
	walkKeys, walkKeysEnd                          string
	keyRun, keyAvailable, keyCheck, lockKeys       string
	checkRows, checkBlocked                        string
	publish, publishDelete, held, complete         string
	releaseClaim, expired, rescue, deletePublished string
	claimedBy                                      string
	status, backlog, getEvent, blockedKeys         string
	waitingBehind                                  string
	fromTable, fromIDs, table, listPublished       string
	nextTopic, pauses, pause, resume               string
	relayPrune, relayBeat, relayGone, relays       string
}

func newQueries(n names) queries {
	return queries{
		insertPrefix:    n.render(insertPrefixSQL),
		insertTuple:     n.render(insertTupleSQL),
		claimReady:      n.render(claimReadySQL),
		markClaimed:     n.render(markClaimedSQL),
		claimedRows:     n.render(claimedRowsSQL),
		walkKeys:        n.render(walkKeysSQL),
		walkKeysEnd:     n.render(walkKeysEndSQL),
		nextTopic:       n.render(nextTopicSQL),
		pauses:          n.render(pausesSQL),
		pause:           n.render(pauseSQL),
		resume:          n.render(resumeSQL),
		relayPrune:      n.render(relayPruneSQL),
		relayBeat:       n.render(relayBeatSQL),
		relayGone:       n.render(relayGoneSQL),
		relays:          n.render(relaysSQL),
		keyRun:          n.render(keyRunSQL),
		keyAvailable:    n.render(keyAvailableSQL),
		keyCheck:        n.render(keyCheckSQL),
		lockKeys:        n.render(lockKeysSQL),
		checkRows:       n.render(checkRowsSQL),
		checkBlocked:    n.render(checkBlockedSQL),
		publish:         n.render(publishSQL),
		publishDelete:   n.render(publishDeleteSQL),
		held:            n.render(heldSQL),
		complete:        n.render(completeSQL),
		releaseClaim:    n.render(releaseClaimSQL),
		claimedBy:       n.render(claimedBySQL),
		expired:         n.render(expiredSQL),
		rescue:          n.render(rescueSQL),
		deletePublished: n.render(deletePublishedSQL),
		status:          n.render(statusSQL),
		backlog:         n.render(backlogSQL),
		getEvent:        n.render(getEventSQL),
		blockedKeys:     n.render(blockedKeysSQL),
		waitingBehind:   n.render(waitingBehindSQL),
		fromTable:       n.render(fromTableSQL),
		fromIDs:         n.render(fromIDsSQL),
		table:           n.Qualified,
		listPublished:   n.render(`SELECT ` + eventColumns + ` FROM {{.Table}}`),
	}
}
