package heraldpg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldbackfill"
)

// The backfill's SQL (heraldbackfill.Store). The source's part of each
// statement (its table or query, key columns and expressions) is the
// operator's own SQL: table and column names are checked by
// heraldbackfill.Source.Validate and spliced unquoted (so they fold to
// lower case as in the operator's own SQL), expressions as given.
const (
	// backfillSeqsSQL draws a batch's seq values before the batch reads
	// anything (see backfillHoldersSQL).
	backfillSeqsSQL = `SELECT nextval(pg_get_serial_sequence('{{.Table}}', 'seq')) FROM generate_series(1, $1)`

	// backfillHoldersSQL lists the transactions, other than this
	// session's, that hold (or wait for) a lock on the outbox table.
	// Every statement that draws an event's seq locks the table first,
	// until its transaction ends: an INSERT (ROW EXCLUSIVE, at parse
	// analysis, before its defaults run nextval), the emit of
	// Config.EmitMessages (ACCESS SHARE). So once every transaction
	// listed after a batch drew its seq values has ended, every event
	// with a lower seq has committed or rolled back, and the batch's
	// read sees it: no live event can then take a place before the
	// batch's and commit a state the batch did not read. A partitioned
	// outbox is locked through its parent. Fast-path locks are listed
	// too.
	backfillHoldersSQL = `SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}')
	FROM pg_locks l
	WHERE l.locktype = 'relation' AND l.relation = '{{.Table}}'::regclass
	  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND l.pid <> pg_backend_pid()`

	// backfillRunningSQL counts those of the transactions listed that
	// still run: each holds its own virtual transaction id's lock until
	// it ends.
	backfillRunningSQL = `SELECT count(*) FROM pg_locks
	WHERE locktype = 'virtualxid' AND virtualxid = ANY($1::text[])`

	// backfillTableSQL is the backfills' record, made by the first
	// backfill of an outbox rather than by a migration: relays never
	// read it. A batch's events and the update of its row commit in one
	// transaction, so a backfill resumes after the last key whose events
	// committed. source is the backfill's definition, compared on every
	// resume.
	backfillTableSQL = `CREATE TABLE IF NOT EXISTS {{.Schema}}."{{.Name}}_backfills" (
		name       text        PRIMARY KEY CHECK (name <> ''),
		source     text        NOT NULL,
		last_key   text[],
		rows_done  bigint      NOT NULL DEFAULT 0,
		done       boolean     NOT NULL DEFAULT false,
		started_at timestamptz NOT NULL DEFAULT now(),
		updated_at timestamptz NOT NULL DEFAULT now()
	)`

	backfillCreateSQL = `INSERT INTO {{.Schema}}."{{.Name}}_backfills" (name, source) VALUES ($1, $2)
	ON CONFLICT (name) DO NOTHING`
	backfillRecordSQL = `SELECT source, last_key, rows_done, done, started_at
	FROM {{.Schema}}."{{.Name}}_backfills" WHERE name = $1`
	backfillLockSQL = backfillRecordSQL + ` FOR UPDATE`
	backfillSaveSQL = `UPDATE {{.Schema}}."{{.Name}}_backfills"
	SET last_key = $2, rows_done = rows_done + $3, done = $4, updated_at = now()
	WHERE name = $1`
	backfillResetSQL = `DELETE FROM {{.Schema}}."{{.Name}}_backfills" WHERE name = $1`

	// backfillInsertSQL is insertManySQL with each event's seq given:
	// those the batch drew before it read its rows.
	// backfillKeyLocksSQL takes the ordered claims' key locks ($1, the
	// driver's lock space) of the batch's keys ($2 topics, $3 keys), in
	// one order, until the batch commits: no claim takes these keys
	// meanwhile (a claim's walk passes a key whose lock it cannot take).
	backfillKeyLocksSQL = `SELECT count(*) FROM (
		SELECT pg_advisory_xact_lock($1::integer, h) FROM (
			SELECT DISTINCT hashtext(b.topic || E'\n' || b.key) AS h
			FROM unnest($2::text[], $3::text[]) AS b(topic, key)
			WHERE b.key <> ''
			ORDER BY 1) k) l`

	// backfillLeasedSQL counts the leases in force, of any relay, whose
	// seq range spans one of the batch's events ($1 topics, $2 keys, $3
	// seqs): a claim that took the key's events on both sides of the
	// event's seq while the batch, which drew its seqs first, waited for
	// the transactions before it. Such a lease would not end with its
	// acknowledgement while the event is ready in its range, and the key
	// would wait for the lease to expire; the batch is tried again with
	// new seqs instead.
	backfillLeasedSQL = `SELECT count(*) FROM {{.Leases}} l
		JOIN unnest($1::text[], $2::text[], $3::bigint[]) AS b(topic, key, seq)
		  ON l.topic = b.topic AND l.key = b.key AND b.seq BETWEEN l.first_seq AND l.last_seq
		WHERE l.lease_until > now()`

	backfillInsertSQL = `INSERT INTO {{.Table}}
	(id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at,
	 event_version, aggregate_version)
	SELECT u.id, u.seq, u.topic, u.key, u.type, u.aggregate_type, u.aggregate_id, u.payload,
	       u.headers::jsonb, coalesce(u.available_at, now()), u.event_version, u.aggregate_version
	FROM unnest($1::uuid[], $2::int8[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
	            $8::bytea[], $9::text[], $10::timestamptz[], $11::int4[], $12::int8[])
	     WITH ORDINALITY AS u(id, seq, topic, key, type, aggregate_type, aggregate_id, payload, headers, available_at,
	                          event_version, aggregate_version, n)
	ORDER BY u.n`

	// readyBacklogSQL counts ready events up to $1, through the ready
	// index: a bounded read whatever the backlog.
	readyBacklogSQL = `SELECT count(*) FROM (SELECT 1 FROM {{.Table}} WHERE state = 'ready' LIMIT $1) s`
)

// backfillSource is a source's statements.
type backfillSource struct {
	from, cols, order string
	keys              []string
}

func newBackfillSource(s heraldbackfill.Source, values bool) (backfillSource, error) {
	if err := s.Validate(); err != nil {
		return backfillSource{}, err
	}
	b := backfillSource{keys: s.KeyColumns}
	if s.Table != "" {
		b.from = s.Table + " AS r"
	} else {
		b.from = "(" + strings.TrimSpace(s.Query) + ") AS r"
	}
	keyText := make([]string, len(s.KeyColumns))
	qualified := make([]string, len(s.KeyColumns))
	for i, c := range s.KeyColumns {
		qualified[i] = "r." + c
		keyText[i] = "r." + c + "::text"
	}
	key := keyText[0]
	if len(keyText) > 1 {
		key = "concat_ws(':', " + strings.Join(keyText, ", ") + ")"
	}
	if s.Key != "" {
		key = "(" + s.Key + ")::text"
	}
	payload := "to_jsonb(r)"
	if s.Payload != "" {
		payload = "(" + s.Payload + ")"
	}
	vals := "NULL::text"
	if values {
		vals = "to_jsonb(r)::text"
	}
	b.cols = strings.Join(keyText, ", ") + ", " + key + ", " + payload + ", " + vals
	b.order = strings.Join(qualified, ", ")
	return b, nil
}

// where is the condition for rows after a key of the given column types.
func (b backfillSource) where(types []string, first int) string {
	ph := make([]string, len(types))
	for i, t := range types {
		ph[i] = fmt.Sprintf("$%d::text::%s", first+i, t)
	}
	return "(" + b.order + ") > (" + strings.Join(ph, ", ") + ")"
}

// types reads the key columns' types from the source's first row; none
// when the source is empty.
func (d *Driver) backfillTypes(ctx context.Context, c conn, b backfillSource) ([]string, error) {
	cols := make([]string, len(b.keys))
	for i, k := range b.keys {
		cols[i] = "pg_typeof(r." + k + ")::text"
	}
	types := make([]string, len(b.keys))
	dest := make([]any, len(types))
	for i := range types {
		dest[i] = &types[i]
	}
	found := false
	err := c.query(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+b.from+" LIMIT 1", nil, func(scan func(...any) error) error {
		found = true
		return scan(dest...)
	})
	if err != nil {
		return nil, fmt.Errorf("reading the key columns' types: %w", err)
	}
	if !found {
		return nil, nil
	}
	return types, nil
}

// BackfillStart records a backfill, or finds its record
// (heraldbackfill.Store).
func (d *Driver) BackfillStart(ctx context.Context, p heraldbackfill.StartParams) (heraldbackfill.Progress, error) {
	if _, err := newBackfillSource(p.Source, false); err != nil {
		return heraldbackfill.Progress{}, err
	}
	if err := d.backfillTable(ctx); err != nil {
		return heraldbackfill.Progress{}, err
	}
	if _, err := d.db.exec(ctx, d.names.render(backfillCreateSQL), p.Name, p.Fingerprint); err != nil {
		return heraldbackfill.Progress{}, fmt.Errorf("heraldpg: recording backfill %q: %w", p.Name, err)
	}
	prog, source, err := d.backfillRecord(ctx, d.db, d.names.render(backfillRecordSQL), p.Name)
	if err != nil {
		return prog, err
	}
	if source != p.Fingerprint {
		return prog, fmt.Errorf("%w: %q was recorded over\n%s\n(reset it to start over, or give the backfill another name)",
			heraldbackfill.ErrSourceChanged, p.Name, source)
	}
	return prog, nil
}

func (d *Driver) backfillRecord(ctx context.Context, c conn, sql, name string) (heraldbackfill.Progress, string, error) {
	var (
		prog   heraldbackfill.Progress
		source string
		found  bool
	)
	err := c.query(ctx, sql, []any{name}, func(scan func(...any) error) error {
		found = true
		return scan(&source, &prog.LastKey, &prog.Rows, &prog.Done, &prog.StartedAt)
	})
	if err != nil {
		return prog, "", fmt.Errorf("heraldpg: reading backfill %q: %w", name, err)
	}
	if !found {
		return prog, "", fmt.Errorf("heraldpg: backfill %q is not recorded", name)
	}
	return prog, source, nil
}

// BackfillCount counts the rows after the recorded key, writing nothing
// (heraldbackfill.Store).
func (d *Driver) BackfillCount(ctx context.Context, p heraldbackfill.StartParams) (heraldbackfill.Progress, int64, error) {
	src, err := newBackfillSource(p.Source, false)
	if err != nil {
		return heraldbackfill.Progress{}, 0, err
	}
	var prog heraldbackfill.Progress
	if !p.FromStart {
		var source string
		prog, source, err = d.backfillRecord(ctx, d.db, d.names.render(backfillRecordSQL), p.Name)
		switch {
		case err != nil && (strings.Contains(err.Error(), "is not recorded") || isUndefinedTable(err)):
			prog, err = heraldbackfill.Progress{}, nil
		case err != nil:
			return prog, 0, err
		case source != p.Fingerprint:
			return prog, 0, fmt.Errorf("%w: %q was recorded over\n%s", heraldbackfill.ErrSourceChanged, p.Name, source)
		}
	}
	q, args := "SELECT count(*) FROM "+src.from, []any{}
	if prog.LastKey != nil {
		types, err := d.backfillTypes(ctx, d.db, src)
		if err != nil || types == nil {
			return prog, 0, err
		}
		q += " WHERE " + src.where(types, 1)
		for _, k := range prog.LastKey {
			args = append(args, k)
		}
	}
	var n int64
	if err := queryRow(ctx, d.db, q, args, &n); err != nil {
		return prog, 0, fmt.Errorf("heraldpg: counting the backfill's rows: %w", err)
	}
	return prog, n, nil
}

// backfillTable makes the backfills' record if it is not there. Two
// backfills that make it at once may collide in the catalog: the loser
// finds it made.
func (d *Driver) backfillTable(ctx context.Context) error {
	_, err := d.db.exec(ctx, d.names.render(backfillTableSQL))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "23505" || pgErr.Code == "42P07") {
		_, err = d.db.exec(ctx, d.names.render(backfillTableSQL))
	}
	if err != nil {
		return fmt.Errorf("heraldpg: making the backfills' record: %w", err)
	}
	return nil
}

// BackfillReset forgets a backfill's record (heraldbackfill.Store).
func (d *Driver) BackfillReset(ctx context.Context, name string) error {
	if err := d.backfillTable(ctx); err != nil {
		return err
	}
	if _, err := d.db.exec(ctx, d.names.render(backfillResetSQL), name); err != nil {
		return fmt.Errorf("heraldpg: resetting backfill %q: %w", name, err)
	}
	return nil
}

// ReadyBacklog counts ready events up to limit (heraldbackfill.Store).
func (d *Driver) ReadyBacklog(ctx context.Context, limit int) (int, error) {
	var n int
	if err := queryRow(ctx, d.db, d.names.render(readyBacklogSQL), []any{limit}, &n); err != nil {
		return 0, fmt.Errorf("heraldpg: counting ready events: %w", err)
	}
	return n, nil
}

// backfillHooks are test hooks: waiting is called when a batch found
// transactions to wait for, locked when it has read and locked its rows,
// leased when an attempt found a lease over its events (errBackfillLeased).
var backfillHooks struct{ waiting, locked, leased func() }

// BackfillBatch writes the next batch of a backfill (heraldbackfill.Store):
// its seq values drawn, the transactions then holding the outbox waited
// for, then its rows read FOR SHARE, their events and its progress
// written in one transaction. The package doc of heraldbackfill walks
// through why this keeps a row's events in order.
func (d *Driver) BackfillBatch(ctx context.Context, p heraldbackfill.BatchParams) (heraldbackfill.BatchResult, error) {
	var res heraldbackfill.BatchResult
	src, err := newBackfillSource(p.Source, p.WantValues)
	if err != nil {
		return res, err
	}
	if p.Limit < 1 {
		return res, errors.New("heraldpg: BackfillBatch: Limit must be positive")
	}
	for attempt := 1; ; attempt++ {
		res, err = d.backfillBatchOnce(ctx, p, src, attempt < backfillLeaseAttempts)
		if !errors.Is(err, errBackfillLeased) {
			return res, err
		}
		if backfillHooks.leased != nil {
			backfillHooks.leased()
		}
	}
}

// backfillLeaseAttempts bounds the attempts of a batch that finds a lease
// over its events (errBackfillLeased): the last one commits anyway, and
// the key then waits for that lease to expire.
const backfillLeaseAttempts = 5

// errBackfillLeased rolls back a batch one of whose events a key lease in
// force spans (backfillLeasedSQL); the next attempt draws new seqs, above
// the lease's range.
var errBackfillLeased = errors.New("a key lease spans one of the batch's events")

// backfillBatchOnce is one attempt of BackfillBatch; with checkLeases it
// fails with errBackfillLeased, writing nothing, when a lease in force
// spans one of its events.
func (d *Driver) backfillBatchOnce(ctx context.Context, p heraldbackfill.BatchParams, src backfillSource,
	checkLeases bool) (heraldbackfill.BatchResult, error) {
	var res heraldbackfill.BatchResult
	seqs, err := d.backfillSeqs(ctx, p.Limit)
	if err != nil {
		return res, err
	}
	if err := d.backfillBarrier(ctx, p.Waiting); err != nil {
		return res, err
	}
	err = d.db.inTxSet(ctx, `SET LOCAL idle_in_transaction_session_timeout = '30s';`, func(c conn) error {
		prog, _, err := d.backfillRecord(ctx, c, d.names.render(backfillLockSQL), p.Name)
		if err != nil {
			return err
		}
		rows, last, err := d.backfillRead(ctx, c, src, prog.LastKey, p.Limit)
		if err != nil {
			return err
		}
		if backfillHooks.locked != nil {
			backfillHooks.locked()
		}
		if len(rows) > 0 {
			if err := d.backfillWrite(ctx, c, p, rows, seqs, checkLeases); err != nil {
				return err
			}
			prog.LastKey = last
		}
		prog.Rows += int64(len(rows))
		prog.Done = len(rows) < p.Limit
		if _, err := c.exec(ctx, d.names.render(backfillSaveSQL), p.Name, prog.LastKey, len(rows), prog.Done); err != nil {
			return fmt.Errorf("recording progress: %w", err)
		}
		res = heraldbackfill.BatchResult{Rows: len(rows), Progress: prog}
		return nil
	})
	if errors.Is(err, errBackfillLeased) {
		return heraldbackfill.BatchResult{}, err
	}
	if err != nil {
		return heraldbackfill.BatchResult{}, fmt.Errorf("heraldpg: backfill batch: %w", err)
	}
	return res, nil
}

func (d *Driver) backfillSeqs(ctx context.Context, n int) ([]int64, error) {
	seqs := make([]int64, 0, n)
	err := d.db.query(ctx, d.names.render(backfillSeqsSQL), []any{n}, func(scan func(...any) error) error {
		var s int64
		if err := scan(&s); err != nil {
			return err
		}
		seqs = append(seqs, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: drawing the backfill's seq values: %w", err)
	}
	slices.Sort(seqs)
	return seqs, nil
}

// backfillBarrier returns once every transaction that held a lock on the
// outbox table when it was called has ended. It polls: a transaction
// holding a lock is most often a producer's or a claim's, a few
// milliseconds long.
func (d *Driver) backfillBarrier(ctx context.Context, waiting func(int, time.Duration)) error {
	var holders []string
	if err := queryRow(ctx, d.db, d.names.render(backfillHoldersSQL), nil, &holders); err != nil {
		return fmt.Errorf("heraldpg: listing the transactions that hold the outbox: %w", err)
	}
	if len(holders) == 0 {
		return nil
	}
	if backfillHooks.waiting != nil {
		backfillHooks.waiting()
	}
	start, pause := time.Now(), 500*time.Microsecond
	for {
		var n int
		if err := queryRow(ctx, d.db, backfillRunningSQL, []any{holders}, &n); err != nil {
			return fmt.Errorf("heraldpg: waiting for the transactions that hold the outbox: %w", err)
		}
		if n == 0 {
			return nil
		}
		if waiting != nil {
			waiting(n, time.Since(start))
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(pause*2, 20*time.Millisecond)
	}
}

// backfillRead reads and locks the next rows after last (nil: from the
// first), with the last one's key.
func (d *Driver) backfillRead(ctx context.Context, c conn, src backfillSource, last []string, limit int) ([]heraldbackfill.Row, []string, error) {
	q, args := "SELECT "+src.cols+" FROM "+src.from, []any{limit}
	if last != nil {
		types, err := d.backfillTypes(ctx, c, src)
		if err != nil {
			return nil, nil, err
		}
		if types == nil {
			return nil, nil, nil
		}
		q += " WHERE " + src.where(types, 2)
		for _, k := range last {
			args = append(args, k)
		}
	}
	q += " ORDER BY " + src.order + " LIMIT $1 FOR SHARE"
	var (
		rows []heraldbackfill.Row
		key  []string
	)
	n := len(src.keys)
	err := c.query(ctx, q, args, func(scan func(...any) error) error {
		k := make([]*string, n)
		var (
			r      heraldbackfill.Row
			values *string
		)
		dest := make([]any, 0, n+3)
		for i := range k {
			dest = append(dest, &k[i])
		}
		dest = append(dest, &r.Key, &r.Payload, &values)
		if err := scan(dest...); err != nil {
			return err
		}
		key = make([]string, n)
		for i, v := range k {
			if v == nil {
				return fmt.Errorf("key column %s is NULL in a row: key columns must not be NULL", src.keys[i])
			}
			key[i] = *v
		}
		if values != nil {
			dec := json.NewDecoder(strings.NewReader(*values))
			dec.UseNumber()
			if err := dec.Decode(&r.Values); err != nil {
				return fmt.Errorf("decoding a row: %w", err)
			}
		}
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading the source's rows: %w", err)
	}
	return rows, key, nil
}

// backfillWrite writes the rows' events, with the batch's seq values in
// key order and the Herald-Backfill header.
func (d *Driver) backfillWrite(ctx context.Context, c conn, p heraldbackfill.BatchParams, rows []heraldbackfill.Row, seqs []int64,
	checkLeases bool) error {
	msgs, err := p.Messages(rows)
	if err != nil {
		return err
	}
	if len(msgs) != len(rows) || len(msgs) > len(seqs) {
		return fmt.Errorf("%d events for %d rows", len(msgs), len(rows))
	}
	msgs, err = herald.Prepare(msgs, p.MaxPayloadBytes)
	if err != nil {
		return err
	}
	n := len(msgs)
	var (
		ids, topics, keys, types, aggTypes, aggIDs, headers = make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		payloads = make([][]byte, n)
		avail    = make([]*time.Time, n)
		versions = make([]int32, n)
		aggVers  = make([]*int64, n)
	)
	for i, m := range msgs {
		h := make(map[string]string, len(m.Headers)+1)
		for k, v := range m.Headers {
			h[k] = v
		}
		h[herald.HeaderBackfill] = p.Name
		if headers[i], err = encodeHeaders(h); err != nil {
			return err
		}
		ids[i], topics[i], keys[i], types[i], aggTypes[i], aggIDs[i] = m.ID, m.Topic, m.Key, m.Type, m.AggregateType, m.AggregateID
		payloads[i], avail[i] = payload(m.Payload), availableAt(m.AvailableAt)
		versions[i], aggVers[i] = eventVersion(m.EventVersion), aggregateVersion(m.AggregateVersion)
	}
	if _, err := c.exec(ctx, d.names.render(backfillKeyLocksSQL), d.lockSpace, topics, keys); err != nil {
		return fmt.Errorf("locking the keys of %d events: %w", n, err)
	}
	if _, err := c.exec(ctx, d.names.render(backfillInsertSQL), uuidArray(ids), seqs[:n], topics, keys, types, aggTypes, aggIDs,
		payloads, headers, avail, versions, aggVers); err != nil {
		return fmt.Errorf("writing %d events: %w", n, err)
	}
	if !checkLeases {
		return nil
	}
	var leased int
	if err := queryRow(ctx, c, d.names.render(backfillLeasedSQL), []any{topics, keys, seqs[:n]}, &leased); err != nil {
		return fmt.Errorf("looking for key leases over the batch's events: %w", err)
	}
	if leased > 0 {
		return errBackfillLeased
	}
	return nil
}

// isUndefinedTable reports whether err is PostgreSQL's "relation does not
// exist": a dry run before any backfill finds no record.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
