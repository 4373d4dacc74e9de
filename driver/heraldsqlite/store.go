package heraldsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Store      = (*Driver)(nil)
	_ heraldadmin.Admin = (*Driver)(nil)
)

// Claim implements herald.Store.
func (d *Driver) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	d.claimMu.Lock()
	defer d.claimMu.Unlock()
	return sqlstore.Claim(ctx, "heraldsqlite", p, sqlstore.Claimers{
		Unordered: func(ctx context.Context, p herald.ClaimParams) ([]sqlstore.ClaimedRow, error) {
			return claimRows(ctx, d.db, d.q.claim, p.Limit, p.Token, p.Owner, p.Lease.Microseconds(), p.MaxBytes)
		},
		Ordered: d.claimOrdered,
	})
}

// claimOrdered walks the keys with ready events from where the last claim
// stopped, then claims each free key's lowest available events. The walk
// only reads, outside any transaction, and nominates keys; the decision is
// taken again in one short write transaction (see blockedKeysOfSQL), which
// SQLite runs alone: the write lock is held for three statements, not for
// the walk.
func (d *Driver) claimOrdered(ctx context.Context, p herald.ClaimParams, perKey int) ([]sqlstore.ClaimedRow, error) {
	maxKeys := max(sqlstore.WalkKeysFactor*p.Limit, 64)

	var (
		candidates []candidateKey
		seen       = map[[2]string]bool{}
	)
	err := d.cursor.Walk(maxKeys, p.Limit, func(from [2]string) (visited, rows int, last [2]string, err error) {
		k, skip := from, false
		for visited < maxKeys && rows < p.Limit {
			var err error
			if skip { // the rest of a paused topic
				err = d.db.QueryRowContext(ctx, d.q.nextTopic, k[0]).Scan(&k[0], &k[1])
			} else {
				err = d.db.QueryRowContext(ctx, d.q.nextKey, k[0], k[1]).Scan(&k[0], &k[1])
			}
			if errors.Is(err, sql.ErrNoRows) {
				break
			}
			if err != nil {
				return 0, 0, last, err
			}
			visited, last = visited+1, k
			if skip = slices.Contains(p.PausedTopics, k[0]); skip || seen[k] {
				continue
			}
			seen[k] = true
			free := p.Unordered || k[1] == "" || slices.Contains(p.UnorderedTopics, k[0])
			run, err := d.keyRun(ctx, d.db, k, perKey, free)
			if err != nil {
				return 0, 0, last, err
			}
			if len(run) > 0 {
				candidates = append(candidates, candidateKey{Topic: k[0], Key: k[1], Free: free})
				rows += len(run)
			}
		}
		return visited, rows, last, nil
	})
	if err != nil || len(candidates) == 0 {
		return nil, err
	}

	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	seqs, err := d.decide(ctx, tx, candidates, perKey, p.Limit, p.MaxBytes)
	if err != nil || len(seqs) == 0 {
		return nil, err
	}
	rows, err := claimRows(ctx, tx, d.q.claimSeqs, jsonArray(seqs), p.Token, p.Owner, p.Lease.Microseconds())
	if err != nil {
		return nil, err
	}
	return rows, tx.Commit()
}

// candidateKey is a key the walk nominated.
type candidateKey struct {
	Topic, Key string
	Free       bool // unordered: any available events, no key rule
}

// decide returns, inside the write transaction, the rows to claim of the
// candidate keys: for an ordered key nothing when one of its events is
// claimed or parked, else its lowest ready events up to the first not yet
// available; for an unordered key its available events among its lowest
// ready ones. At most perKey per key and limit in all, in candidate order,
// taken while the bytes of those before them are under maxBytes.
func (d *Driver) decide(ctx context.Context, tx *sql.Tx, cands []candidateKey, perKey, limit int, maxBytes int64) ([]int64, error) {
	keys := make([][3]any, len(cands))
	for i, c := range cands {
		keys[i] = [3]any{c.Topic, c.Key, c.Free}
	}
	param := jsonArray(keys)
	blocked := map[int]bool{}
	rows, err := tx.QueryContext(ctx, d.q.blockedKeysOf, param)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var i int
		if err := rows.Scan(&i); err != nil {
			rows.Close()
			return nil, err
		}
		blocked[i] = true
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}

	rows, err = tx.QueryContext(ctx, d.q.runsOf, param, perKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var (
		seqs    []int64
		bytes   int64
		stopped = map[int]bool{} // ordered keys past their first unavailable event
	)
	for rows.Next() {
		var (
			i         int
			seq, size int64
			available bool
		)
		if err := rows.Scan(&i, &seq, &available, &size); err != nil {
			return nil, err
		}
		free := cands[i].Free
		switch {
		case len(seqs) >= limit, bytes >= maxBytes, blocked[i] && !free, stopped[i]:
		case !available && !free:
			stopped[i] = true
		case available:
			seqs, bytes = append(seqs, seq), bytes+size
		}
	}
	return seqs, rows.Err()
}

// keyRun returns the sequence numbers of key's events to claim: for an
// ordered key nothing when one of its events is claimed or parked or its
// lowest ready event is not yet available, else its lowest ready events up
// to the first not yet available; for an unordered key its available ready
// events. At most perKey either way.
func (d *Driver) keyRun(ctx context.Context, q rowQueryer, k [2]string, perKey int, unordered bool) ([]int64, error) {
	if !unordered {
		var blocked bool
		if err := q.QueryRowContext(ctx, d.q.keyBlocked, k[0], k[1]).Scan(&blocked); err != nil {
			return nil, err
		}
		if blocked {
			return nil, nil
		}
	}
	query := d.q.keyRun
	if unordered {
		query = d.q.keyAvailable
	}
	rows, err := q.QueryContext(ctx, query, k[0], k[1], perKey)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var run []int64
	for rows.Next() {
		var (
			seq       int64
			available bool
		)
		if err := rows.Scan(&seq, &available); err != nil {
			return nil, err
		}
		if !available {
			break
		}
		run = append(run, seq)
	}
	return run, rows.Err()
}

// rowQueryer is what a *sql.DB and a *sql.Tx have in common for reads.
type rowQueryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queryer is what a *sql.DB and a *sql.Tx have in common for a claim.
type queryer interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// claimRows runs a claim statement and scans the rows it returns. A row
// whose headers no Envelope can carry (a header that is a number) comes
// back marked unreadable, for sqlstore.Claim to dispose of, instead of
// failing the claim. The table's own checks keep created_at an integer,
// and any integer is a time.
func claimRows(ctx context.Context, q queryer, query string, args ...any) ([]sqlstore.ClaimedRow, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sqlstore.ClaimedRow
	for rows.Next() {
		var (
			r       sqlstore.ClaimedRow
			headers []byte
			created int64
		)
		if err := rows.Scan(&r.ID, &r.Seq, &r.Topic, &r.Key, &r.Type, &r.AggregateType, &r.AggregateID,
			&r.EventVersion, &r.AggregateVersion, &r.Payload, &headers, &r.Attempt, &created); err != nil {
			return nil, err
		}
		if r.Headers, err = sqlstore.DecodeHeaders(headers); err != nil {
			r.Unreadable = err.Error()
		}
		r.CreatedAt = time.UnixMicro(created)
		out = append(out, r)
	}
	return out, rows.Err()
}

// checkLimit refuses a negative limit, which SQLite would take as no limit
// at all.
func checkLimit(limit int) error {
	if limit < 0 {
		return fmt.Errorf("heraldsqlite: negative limit %d", limit)
	}
	return nil
}

// jsonArray encodes a parameter unpacked in SQL by json_each.
func jsonArray(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// Only strings, numbers and booleans are ever encoded.
		panic(fmt.Sprintf("heraldsqlite: encoding parameter: %v", err))
	}
	return string(b)
}

// Complete implements herald.Store in one statement, or, for p.Delete with
// failures, two in one transaction: SQLite has no DELETE inside a WITH.
func (d *Driver) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	var res herald.CompleteResult
	if len(p.Published)+len(p.Failed) == 0 {
		return res, nil
	}
	if len(p.Failed) == 0 {
		sql := d.q.publish
		if p.Delete {
			sql = d.q.publishDelete
		}
		n, err := d.exec(ctx, sql, jsonArray(p.Published), p.Token)
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		res.Published = n
		return res, nil
	}
	var c rowsQuerier = d.db
	if p.Delete && len(p.Published) > 0 {
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		defer func() { _ = tx.Rollback() }()
		r, err := tx.ExecContext(ctx, d.q.publishDelete, jsonArray(p.Published), p.Token)
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		res.Published, c = int(n), tx
		p.Published = nil
	}
	if err := d.complete(ctx, c, p, &res); err != nil {
		return herald.CompleteResult{}, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
	}
	if tx, ok := c.(*sql.Tx); ok {
		if err := tx.Commit(); err != nil {
			return herald.CompleteResult{}, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
	}
	return res, nil
}

// complete runs completeSQL on c and adds what it changed to res.
func (d *Driver) complete(ctx context.Context, c rowsQuerier, p herald.CompleteParams, res *herald.CompleteResult) error {
	rows, err := c.QueryContext(ctx, d.q.complete, jsonArray(sqlstore.NewWrites(p).Rows()), p.Token)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return err
		}
		if heraldadmin.State(state) == heraldadmin.StatePublished {
			res.Published++
		} else {
			res.Failed = append(res.Failed, id)
		}
	}
	return rows.Err()
}

// exec runs a statement and returns how many rows it changed.
func (d *Driver) exec(ctx context.Context, query string, args ...any) (int, error) {
	r, err := d.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// ReleaseClaim implements herald.Store.
func (d *Driver) ReleaseClaim(ctx context.Context, token string) (int, error) {
	n, err := d.exec(ctx, d.q.releaseClaim, token)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: releasing a claim: %w", err)
	}
	return n, nil
}

// RescueExpired implements herald.Store.
func (d *Driver) RescueExpired(ctx context.Context, limit int) (int, error) {
	if err := checkLimit(limit); err != nil {
		return 0, err
	}
	n, err := d.exec(ctx, d.q.rescue, limit)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: rescuing expired leases: %w", err)
	}
	return n, nil
}

// DeletePublished implements herald.Store.
func (d *Driver) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if err := checkLimit(limit); err != nil {
		return 0, err
	}
	n, err := d.exec(ctx, d.q.deletePublished, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: deleting published rows: %w", err)
	}
	return n, nil
}

// Status implements heraldadmin.Admin. It counts every row, so it reads the
// whole table: an operator's tool, not something to poll every second.
func (d *Driver) Status(ctx context.Context) (heraldadmin.Status, error) {
	var st heraldadmin.Status
	rows, err := d.db.QueryContext(ctx, d.q.status)
	if err != nil {
		return st, fmt.Errorf("heraldsqlite: reading status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ts    heraldadmin.TopicStatus
			state string
			ageUS float64
		)
		if err := rows.Scan(&ts.Topic, &state, &ts.Count, &ageUS); err != nil {
			return st, fmt.Errorf("heraldsqlite: reading status: %w", err)
		}
		ts.State = heraldadmin.State(state)
		ts.Oldest = sqlstore.Age(ageUS, time.Microsecond)
		st.Topics = append(st.Topics, ts)
		if (ts.State == heraldadmin.StateReady || ts.State == heraldadmin.StateClaimed) && ts.Oldest > st.OldestPending {
			st.OldestPending = ts.Oldest
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("heraldsqlite: reading status: %w", err)
	}
	return st, nil
}

// filterSQL turns a checked EventFilter into a WHERE clause, its
// arguments and the listing limit.
func filterSQL(f heraldadmin.EventFilter) (string, []any, int, error) {
	sel, err := sqlstore.Select(f)
	if err != nil {
		return "", nil, 0, fmt.Errorf("heraldsqlite: %w", err)
	}
	switch {
	case len(sel.IDs) > 0:
		return whereIDsSQL, []any{string(sel.State), jsonArray(sel.IDs)}, sel.Limit, nil
	case sel.Topic != "":
		return whereTopicSQL, []any{string(sel.State), sel.Topic}, sel.Limit, nil
	}
	return whereAllSQL, []any{string(sel.State)}, sel.Limit, nil
}

// canonicalID returns id as stored: a UUID in lower-case canonical text.
func canonicalID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", fmt.Errorf("heraldsqlite: %q is not an event id (a UUID)", id)
	}
	return u.String(), nil
}

// ListEvents implements heraldadmin.Admin.
func (d *Driver) ListEvents(ctx context.Context, f heraldadmin.EventFilter) ([]heraldadmin.EventRow, error) {
	where, args, limit, err := filterSQL(f)
	if err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, d.q.listEvents+where+listOrderSQL, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing events: %w", err)
	}
	defer rows.Close()
	var out []heraldadmin.EventRow
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("heraldsqlite: listing events: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing events: %w", err)
	}
	return out, nil
}

// GetEvent implements heraldadmin.Admin.
func (d *Driver) GetEvent(ctx context.Context, id string) (heraldadmin.EventRow, error) {
	cid, err := canonicalID(id)
	if err != nil {
		return heraldadmin.EventRow{}, err
	}
	rows, err := d.db.QueryContext(ctx, d.q.getEvent, cid)
	if err != nil {
		return heraldadmin.EventRow{}, fmt.Errorf("heraldsqlite: reading event: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return heraldadmin.EventRow{}, fmt.Errorf("heraldsqlite: reading event: %w", err)
		}
		return heraldadmin.EventRow{}, fmt.Errorf("heraldsqlite: event %s: %w", cid, heraldadmin.ErrNotFound)
	}
	ev, err := scanEvent(rows)
	if err != nil {
		return ev, fmt.Errorf("heraldsqlite: reading event: %w", err)
	}
	return ev, nil
}

// scanEvent reads a whole row for operators and tests. It shows any row,
// whatever another program wrote in it: see micros for timestamps,
// sqlstore.DisplayHeaders for headers.
func scanEvent(rows *sql.Rows) (heraldadmin.EventRow, error) {
	var (
		e                      heraldadmin.EventRow
		headers                []byte
		state                  string
		created, available     micros
		lease, published, dead micros
	)
	err := rows.Scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
		&e.EventVersion, &e.AggregateVersion, &e.Payload, &headers, &e.Attempt, &created, &state, &available, &lease,
		&e.ClaimedBy, &published, &dead, &e.LastError, &e.Parked)
	e.State = heraldadmin.State(state)
	e.Headers = sqlstore.DisplayHeaders(headers)
	e.CreatedAt, e.AvailableAt = created.time(), available.time()
	e.LeaseUntil, e.PublishedAt, e.DeadAt = lease.ptr(), published.ptr(), dead.ptr()
	return e, err
}

// micros scans a timestamp column: integer microseconds since the Unix
// epoch. The columns the relay owns take any value another program put
// there; one that is not an integer (text, a REAL) reads as no time at all,
// rather than failing the read of every row beside it.
type micros struct {
	us    int64
	valid bool
}

// Scan implements sql.Scanner.
func (m *micros) Scan(src any) error {
	m.us, m.valid = 0, false
	if v, ok := src.(int64); ok {
		m.us, m.valid = v, true
	}
	return nil
}

// time returns the time, the zero time when there is none.
func (m micros) time() time.Time {
	if !m.valid {
		return time.Time{}
	}
	return time.UnixMicro(m.us)
}

// ptr returns the time, nil when there is none.
func (m micros) ptr() *time.Time {
	if !m.valid {
		return nil
	}
	t := time.UnixMicro(m.us)
	return &t
}

// RequeueDead implements heraldadmin.Admin.
func (d *Driver) RequeueDead(ctx context.Context, f heraldadmin.EventFilter) (int, error) {
	f.State = heraldadmin.StateDead
	where, args, _, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	n, err := d.exec(ctx, d.q.requeue+where, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: requeueing dead events: %w", err)
	}
	return n, nil
}

// DiscardDead implements heraldadmin.Admin. Without f.Resume it first checks,
// in the same transaction, that no selected row parks a key with events
// waiting behind it.
func (d *Driver) DiscardDead(ctx context.Context, f heraldadmin.EventFilter) (int, error) {
	f.State = heraldadmin.StateDead
	where, args, _, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: discarding dead events: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if !f.Resume {
		// The selection's columns are unqualified; d is the only table in
		// the outer query.
		parked, err := blockedKeys(ctx, tx, d.q.blockedKeys+where+blockedKeysWhereSQL+d.q.waitingBehind+blockedKeysOrderSQL, append(args, 100)...)
		if err != nil {
			return 0, fmt.Errorf("heraldsqlite: discarding dead events: %w", err)
		}
		if len(parked) > 0 {
			return 0, &heraldadmin.ParkedError{Keys: parked}
		}
	}
	r, err := tx.ExecContext(ctx, d.q.discard+where, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: discarding dead events: %w", err)
	}
	n, err := r.RowsAffected()
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: discarding dead events: %w", err)
	}
	return int(n), nil
}

// Backlog implements heraldadmin.Admin.
func (d *Driver) Backlog(ctx context.Context) ([]heraldadmin.TopicBacklog, error) {
	rows, err := d.db.QueryContext(ctx, d.q.backlog)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: reading the backlog: %w", err)
	}
	defer rows.Close()
	var out []heraldadmin.TopicBacklog
	for rows.Next() {
		var (
			b     heraldadmin.TopicBacklog
			ageUS float64
		)
		if err := rows.Scan(&b.Topic, &b.Ready, &b.Claimed, &b.Dead, &b.ParkedKeys, &ageUS); err != nil {
			return nil, fmt.Errorf("heraldsqlite: reading the backlog: %w", err)
		}
		b.OldestPending = sqlstore.Age(ageUS, time.Microsecond)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: reading the backlog: %w", err)
	}
	return out, nil
}

// BlockedKeys implements heraldadmin.Admin.
func (d *Driver) BlockedKeys(ctx context.Context, limit int) ([]heraldadmin.BlockedKey, error) {
	if limit <= 0 {
		limit = 100
	}
	keys, err := blockedKeys(ctx, d.db, d.q.blockedKeys+` WHERE d.state = 'dead'`+blockedKeysWhereSQL+blockedKeysOrderSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing blocked keys: %w", err)
	}
	return keys, nil
}

func blockedKeys(ctx context.Context, q queryer, query string, args ...any) ([]heraldadmin.BlockedKey, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []heraldadmin.BlockedKey
	for rows.Next() {
		var (
			k     heraldadmin.BlockedKey
			since micros
		)
		if err := rows.Scan(&k.Topic, &k.Key, &k.EventID, &since, &k.Waiting); err != nil {
			return nil, err
		}
		k.Since = since.time()
		out = append(out, k)
	}
	return out, rows.Err()
}
