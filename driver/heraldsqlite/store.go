package heraldsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
)

var (
	_ herald.Store = (*Driver)(nil)
	_ herald.Admin = (*Driver)(nil)
)

func micros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func microsPtr(us sql.NullInt64) *time.Time {
	if !us.Valid {
		return nil
	}
	t := micros(us.Int64)
	return &t
}

func jsonList(ids []string) string {
	b, _ := json.Marshal(ids) // strings always marshal
	return string(b)
}

// Claim implements herald.Store.
func (d *Driver) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	rows, err := d.db.QueryContext(ctx, d.q.claim, p.Token, p.Owner, p.Lease.Microseconds(), p.Limit)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: claiming: %w", err)
	}
	defer rows.Close()
	envs := make([]herald.Envelope, 0, p.Limit)
	for rows.Next() {
		var (
			e       herald.Envelope
			headers string
			created int64
		)
		if err := rows.Scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
			&e.Payload, &headers, &e.Attempt, &created); err != nil {
			return nil, fmt.Errorf("heraldsqlite: claiming: %w", err)
		}
		e.CreatedAt, e.Headers = micros(created), decodeHeaders(headers)
		envs = append(envs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: claiming: %w", err)
	}
	slices.SortFunc(envs, func(a, b herald.Envelope) int { return int(a.Seq - b.Seq) })
	return envs, nil
}

// decodeHeaders reads the headers column: string values as they are,
// others as their JSON text. The relay validates the result.
func decodeHeaders(raw string) map[string]string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out
}

type failure struct {
	ID        string `json:"id"`
	Err       string `json:"err"`
	Delay     int64  `json:"delay"`
	Permanent bool   `json:"permanent"`
	Outage    bool   `json:"outage"`
}

// Complete implements herald.Store: confirmed and failed rows change in one
// transaction, each kind in one statement.
func (d *Driver) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	var res herald.CompleteResult
	if len(p.Published) == 0 && len(p.Failed) == 0 {
		return res, nil
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
	}
	defer tx.Rollback()
	if len(p.Published) > 0 {
		r, err := tx.ExecContext(ctx, d.q.publish, p.Token, jsonList(p.Published))
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		n, _ := r.RowsAffected()
		res.Published = int(n)
	}
	if len(p.Failed) > 0 {
		fs := make([]failure, len(p.Failed))
		for i, f := range p.Failed {
			fs[i] = failure{f.ID, f.Error, f.Delay.Microseconds(), f.Permanent, f.Outage}
		}
		b, err := json.Marshal(fs)
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		rows, err := tx.QueryContext(ctx, d.q.fail, p.Token, string(b), p.Policy.MaxAttempts, p.Policy.MaxAge.Microseconds())
		if err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
		for rows.Next() {
			var id, state string
			if err := rows.Scan(&id, &state); err != nil {
				rows.Close()
				return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
			}
			if herald.State(state) == herald.StateDead {
				res.Dead = append(res.Dead, id)
			} else {
				res.Retried++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return res, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return herald.CompleteResult{}, fmt.Errorf("heraldsqlite: acknowledging batch: %w", err)
	}
	return res, nil
}

func (d *Driver) exec(ctx context.Context, what, query string, args ...any) (int, error) {
	r, err := d.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: %s: %w", what, err)
	}
	n, err := r.RowsAffected()
	return int(n), err
}

// Release implements herald.Store.
func (d *Driver) Release(ctx context.Context, token string, ids []string) (int, error) {
	return d.exec(ctx, "releasing rows", d.q.release, token, jsonList(ids))
}

// RescueExpired implements herald.Store.
func (d *Driver) RescueExpired(ctx context.Context, limit int) (int, error) {
	return d.exec(ctx, "rescuing expired leases", d.q.rescue, limit)
}

// DeletePublished implements herald.Store.
func (d *Driver) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	return d.exec(ctx, "deleting published rows", d.q.deletePublished, olderThan.Microseconds(), limit)
}

// Status implements herald.Admin.
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
			age   int64
		)
		if err := rows.Scan(&ts.Topic, &state, &ts.Count, &age); err != nil {
			return st, fmt.Errorf("heraldsqlite: reading status: %w", err)
		}
		ts.State, ts.Oldest = herald.State(state), time.Duration(max(age, 0))*time.Microsecond
		st.Topics = append(st.Topics, ts)
		if (ts.State == herald.StateReady || ts.State == herald.StateClaimed) && ts.Oldest > st.OldestPending {
			st.OldestPending = ts.Oldest
		}
	}
	return st, rows.Err()
}

func filterSQL(f herald.EventFilter) (string, []any, error) {
	state := f.State
	if state == "" {
		state = herald.StateDead
	}
	switch state {
	case herald.StateReady, herald.StateClaimed, herald.StatePublished, herald.StateDead:
	default:
		return "", nil, fmt.Errorf("heraldsqlite: unknown state %q", state)
	}
	set := 0
	for _, b := range []bool{len(f.IDs) > 0, f.Topic != "", f.All} {
		if b {
			set++
		}
	}
	if set != 1 {
		return "", nil, fmt.Errorf("heraldsqlite: select rows by ids, by topic, or all: exactly one")
	}
	where, args := "state = ?", []any{string(state)}
	switch {
	case len(f.IDs) > 0:
		ids := make([]string, len(f.IDs))
		for i, id := range f.IDs {
			u, err := uuid.Parse(id)
			if err != nil {
				return "", nil, fmt.Errorf("heraldsqlite: %q is not an event id (a UUID)", id)
			}
			ids[i] = u.String()
		}
		where += " AND id IN (SELECT value FROM json_each(?))"
		args = append(args, jsonList(ids))
	case f.Topic != "":
		where += " AND topic = ?"
		args = append(args, f.Topic)
	}
	return where, args, nil
}

func (d *Driver) events(ctx context.Context, query string, args ...any) ([]herald.EventRow, error) {
	rows, err := d.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []herald.EventRow
	for rows.Next() {
		var (
			e                        herald.EventRow
			headers, state           string
			created, available       int64
			lease, published, deadAt sql.NullInt64
		)
		if err := rows.Scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
			&e.Payload, &headers, &e.Attempt, &created, &state, &available, &lease,
			&e.ClaimedBy, &published, &deadAt, &e.LastError); err != nil {
			return nil, err
		}
		e.Headers, e.State = decodeHeaders(headers), herald.State(state)
		e.CreatedAt, e.AvailableAt = micros(created), micros(available)
		e.LeaseUntil, e.PublishedAt, e.DeadAt = microsPtr(lease), microsPtr(published), microsPtr(deadAt)
		out = append(out, e)
	}
	return out, rows.Err()
}

// ListEvents implements herald.Admin.
func (d *Driver) ListEvents(ctx context.Context, f herald.EventFilter) ([]herald.EventRow, error) {
	where, args, err := filterSQL(f)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	evs, err := d.events(ctx, `SELECT `+eventColumns+` FROM `+d.q.table+` WHERE `+where+
		` ORDER BY seq LIMIT `+strconv.Itoa(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing events: %w", err)
	}
	return evs, nil
}

// GetEvent implements herald.Admin.
func (d *Driver) GetEvent(ctx context.Context, id string) (herald.EventRow, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return herald.EventRow{}, fmt.Errorf("heraldsqlite: %q is not an event id (a UUID)", id)
	}
	evs, err := d.events(ctx, `SELECT `+eventColumns+` FROM `+d.q.table+` WHERE id = ?`, u.String())
	if err != nil {
		return herald.EventRow{}, fmt.Errorf("heraldsqlite: reading event: %w", err)
	}
	if len(evs) == 0 {
		return herald.EventRow{}, fmt.Errorf("heraldsqlite: event %s: %w", id, herald.ErrNotFound)
	}
	return evs[0], nil
}

// RequeueDead implements herald.Admin.
func (d *Driver) RequeueDead(ctx context.Context, f herald.EventFilter) (int, error) {
	f.State = herald.StateDead
	where, args, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	return d.exec(ctx, "requeueing dead events", `UPDATE `+d.q.table+`
		SET state = 'ready', attempts = 0, available_at = `+nowSQL+`, dead_at = NULL WHERE `+where, args...)
}

// DiscardDead implements herald.Admin.
func (d *Driver) DiscardDead(ctx context.Context, f herald.EventFilter) (int, error) {
	f.State = herald.StateDead
	where, args, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	return d.exec(ctx, "discarding dead events", `DELETE FROM `+d.q.table+` WHERE `+where, args...)
}
