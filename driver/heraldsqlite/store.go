package heraldsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Store = (*Driver)(nil)
	_ herald.Admin = (*Driver)(nil)
)

// Claim implements herald.Store.
func (d *Driver) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	if err := checkLimit(p.Limit); err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, d.q.claim, p.Limit, p.Token, p.Owner, p.Lease.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: claiming: %w", err)
	}
	defer rows.Close()
	envs := make([]herald.Envelope, 0, p.Limit)
	for rows.Next() {
		var (
			e       herald.Envelope
			headers []byte
			created int64
		)
		if err := rows.Scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
			&e.Payload, &headers, &e.Attempt, &created); err != nil {
			return nil, fmt.Errorf("heraldsqlite: claiming: %w", err)
		}
		e.Headers = sqlstore.DecodeHeaders(headers)
		e.CreatedAt = time.UnixMicro(created)
		envs = append(envs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: claiming: %w", err)
	}
	// RETURNING comes in no particular order; publish in write order.
	slices.SortFunc(envs, func(a, b herald.Envelope) int { return cmp.Compare(a.Seq, b.Seq) })
	return envs, nil
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

// Complete implements herald.Store in one statement.
func (d *Driver) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	var res herald.CompleteResult
	if len(p.Published)+len(p.Failed) == 0 {
		return res, nil
	}
	if len(p.Failed) == 0 {
		r, err := d.db.ExecContext(ctx, d.q.publish, jsonArray(p.Published), p.Token)
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		n, err := r.RowsAffected()
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		res.Published = int(n)
		return res, nil
	}
	// One [id, ok, error, delay_us, permanent, outage] per event.
	outcomes := make([][6]any, 0, len(p.Published)+len(p.Failed))
	for _, id := range p.Published {
		outcomes = append(outcomes, [6]any{id, true, "", 0, false, false})
	}
	for _, f := range p.Failed {
		outcomes = append(outcomes, [6]any{f.ID, false, f.Error, f.Delay.Microseconds(), f.Permanent, f.Outage})
	}
	rows, err := d.db.QueryContext(ctx, d.q.complete, jsonArray(outcomes), p.Token,
		p.Policy.MaxAttempts, p.Policy.MaxAge.Microseconds())
	if err != nil {
		return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, state string
		if err := rows.Scan(&id, &state); err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		switch herald.State(state) {
		case herald.StatePublished:
			res.Published++
		case herald.StateDead:
			res.Dead = append(res.Dead, id)
		default:
			res.Retried++
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
	}
	return res, nil
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

// Release implements herald.Store.
func (d *Driver) Release(ctx context.Context, token string, ids []string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := d.exec(ctx, d.q.release, jsonArray(ids), token)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: releasing rows: %w", err)
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

// Status implements herald.Admin. It counts every row, so it reads the
// whole table: an operator's tool, not something to poll every second.
func (d *Driver) Status(ctx context.Context) (herald.Status, error) {
	var st herald.Status
	rows, err := d.db.QueryContext(ctx, d.q.status)
	if err != nil {
		return st, fmt.Errorf("heraldsqlite: reading status: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ts    herald.TopicStatus
			state string
			ageUS int64
		)
		if err := rows.Scan(&ts.Topic, &state, &ts.Count, &ageUS); err != nil {
			return st, fmt.Errorf("heraldsqlite: reading status: %w", err)
		}
		ts.State = herald.State(state)
		ts.Oldest = time.Duration(ageUS) * time.Microsecond
		st.Topics = append(st.Topics, ts)
		if (ts.State == herald.StateReady || ts.State == herald.StateClaimed) && ts.Oldest > st.OldestPending {
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
func filterSQL(f herald.EventFilter) (string, []any, int, error) {
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

// ListEvents implements herald.Admin.
func (d *Driver) ListEvents(ctx context.Context, f herald.EventFilter) ([]herald.EventRow, error) {
	where, args, limit, err := filterSQL(f)
	if err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, d.q.listEvents+where+listOrderSQL, append(args, limit)...)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing events: %w", err)
	}
	defer rows.Close()
	var out []herald.EventRow
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

// GetEvent implements herald.Admin.
func (d *Driver) GetEvent(ctx context.Context, id string) (herald.EventRow, error) {
	cid, err := canonicalID(id)
	if err != nil {
		return herald.EventRow{}, err
	}
	rows, err := d.db.QueryContext(ctx, d.q.getEvent, cid)
	if err != nil {
		return herald.EventRow{}, fmt.Errorf("heraldsqlite: reading event: %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return herald.EventRow{}, fmt.Errorf("heraldsqlite: reading event: %w", err)
		}
		return herald.EventRow{}, fmt.Errorf("heraldsqlite: event %s: %w", cid, herald.ErrNotFound)
	}
	ev, err := scanEvent(rows)
	if err != nil {
		return ev, fmt.Errorf("heraldsqlite: reading event: %w", err)
	}
	return ev, nil
}

func scanEvent(rows *sql.Rows) (herald.EventRow, error) {
	var (
		e                      herald.EventRow
		headers                []byte
		state                  string
		created, available     int64
		lease, published, dead sql.NullInt64
	)
	err := rows.Scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
		&e.Payload, &headers, &e.Attempt, &created, &state, &available, &lease,
		&e.ClaimedBy, &published, &dead, &e.LastError)
	e.State = herald.State(state)
	e.Headers = sqlstore.DecodeHeaders(headers)
	e.CreatedAt = time.UnixMicro(created)
	e.AvailableAt = time.UnixMicro(available)
	e.LeaseUntil, e.PublishedAt, e.DeadAt = timePtr(lease), timePtr(published), timePtr(dead)
	return e, err
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMicro(v.Int64)
	return &t
}

// RequeueDead implements herald.Admin.
func (d *Driver) RequeueDead(ctx context.Context, f herald.EventFilter) (int, error) {
	f.State = herald.StateDead
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

// DiscardDead implements herald.Admin.
func (d *Driver) DiscardDead(ctx context.Context, f herald.EventFilter) (int, error) {
	f.State = herald.StateDead
	where, args, _, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	n, err := d.exec(ctx, d.q.discard+where, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: discarding dead events: %w", err)
	}
	return n, nil
}
