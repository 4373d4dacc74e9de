package heraldpg

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Store = (*Driver)(nil)
	_ herald.Admin = (*Driver)(nil)
)

// Claim implements herald.Store.
func (d *Driver) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	envs := make([]herald.Envelope, 0, p.Limit)
	err := d.db.query(ctx, d.q.claim, []any{p.Limit, p.Token, p.Owner, p.Lease.Microseconds()},
		func(scan func(...any) error) error {
			var (
				e       herald.Envelope
				headers []byte
			)
			if err := scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
				&e.Payload, &headers, &e.Attempt, &e.CreatedAt); err != nil {
				return err
			}
			e.Headers = sqlstore.DecodeHeaders(headers)
			envs = append(envs, e)
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: claiming: %w", err)
	}
	// RETURNING comes in no particular order; publish in write order.
	slices.SortFunc(envs, func(a, b herald.Envelope) int { return cmp.Compare(a.Seq, b.Seq) })
	return envs, nil
}

// Complete implements herald.Store in one statement.
func (d *Driver) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	var res herald.CompleteResult
	if len(p.Failed) == 0 {
		if len(p.Published) == 0 {
			return res, nil
		}
		n, err := d.db.exec(ctx, d.q.publish, p.Published, p.Token)
		if err != nil {
			return res, fmt.Errorf("heraldpg: acknowledging batch: %w", err)
		}
		res.Published = int(n)
		return res, nil
	}
	n := len(p.Published) + len(p.Failed)
	var (
		ids       = make([]string, 0, n)
		ok        = make([]bool, 0, n)
		errs      = make([]string, 0, n)
		delays    = make([]int64, 0, n)
		permanent = make([]bool, 0, n)
		outage    = make([]bool, 0, n)
	)
	for _, id := range p.Published {
		ids, ok, errs, delays, permanent, outage = append(ids, id), append(ok, true), append(errs, ""),
			append(delays, 0), append(permanent, false), append(outage, false)
	}
	for _, f := range p.Failed {
		ids, ok, errs, delays, permanent, outage = append(ids, f.ID), append(ok, false), append(errs, f.Error),
			append(delays, f.Delay.Microseconds()), append(permanent, f.Permanent), append(outage, f.Outage)
	}
	err := d.db.query(ctx, d.q.complete, []any{ids, p.Token, ok, errs, delays, permanent, outage,
		p.Policy.MaxAttempts, p.Policy.MaxAge.Microseconds()}, func(scan func(...any) error) error {
		var id, state string
		if err := scan(&id, &state); err != nil {
			return err
		}
		switch herald.State(state) {
		case herald.StatePublished:
			res.Published++
		case herald.StateDead:
			res.Dead = append(res.Dead, id)
		default:
			res.Retried++
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("heraldpg: acknowledging batch: %w", err)
	}
	return res, nil
}

// Release implements herald.Store.
func (d *Driver) Release(ctx context.Context, token string, ids []string) (int, error) {
	n, err := d.db.exec(ctx, d.q.release, ids, token)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: releasing rows: %w", err)
	}
	return int(n), nil
}

// RescueExpired implements herald.Store.
func (d *Driver) RescueExpired(ctx context.Context, limit int) (int, error) {
	n, err := d.db.exec(ctx, d.q.rescue, limit)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: rescuing expired leases: %w", err)
	}
	return int(n), nil
}

// DeletePublished implements herald.Store.
func (d *Driver) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := d.db.exec(ctx, d.q.deletePublished, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: deleting published rows: %w", err)
	}
	return int(n), nil
}

// Status implements herald.Admin. It counts every row, so it reads the
// whole table: an operator's tool, not something to poll every second.
func (d *Driver) Status(ctx context.Context) (herald.Status, error) {
	var st herald.Status
	err := d.db.query(ctx, d.q.status, nil, func(scan func(...any) error) error {
		var (
			ts    herald.TopicStatus
			state string
			age   float64
		)
		if err := scan(&ts.Topic, &state, &ts.Count, &age); err != nil {
			return err
		}
		ts.State = herald.State(state)
		ts.Oldest = time.Duration(age * float64(time.Second))
		st.Topics = append(st.Topics, ts)
		if (ts.State == herald.StateReady || ts.State == herald.StateClaimed) && ts.Oldest > st.OldestPending {
			st.OldestPending = ts.Oldest
		}
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("heraldpg: reading status: %w", err)
	}
	return st, nil
}

// filterSQL turns a checked EventFilter into a WHERE clause and its
// arguments.
func filterSQL(f herald.EventFilter) (string, []any, int, error) {
	sel, err := sqlstore.Select(f)
	if err != nil {
		return "", nil, 0, fmt.Errorf("heraldpg: %w", err)
	}
	where, args := "state = $1", []any{string(sel.State)}
	switch {
	case len(sel.IDs) > 0:
		where += " AND id = ANY($2::uuid[])"
		args = append(args, sel.IDs)
	case sel.Topic != "":
		where += " AND topic = $2"
		args = append(args, sel.Topic)
	}
	return where, args, sel.Limit, nil
}

// ListEvents implements herald.Admin.
func (d *Driver) ListEvents(ctx context.Context, f herald.EventFilter) ([]herald.EventRow, error) {
	where, args, limit, err := filterSQL(f)
	if err != nil {
		return nil, err
	}
	sql := `SELECT ` + eventColumns + ` FROM ` + d.q.table + ` WHERE ` + where +
		` ORDER BY seq LIMIT ` + strconv.Itoa(limit)
	var out []herald.EventRow
	err = d.db.query(ctx, sql, args, func(scan func(...any) error) error {
		ev, err := scanEvent(scan)
		out = append(out, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: listing events: %w", err)
	}
	return out, nil
}

// GetEvent implements herald.Admin.
func (d *Driver) GetEvent(ctx context.Context, id string) (herald.EventRow, error) {
	if !validUUID(id) {
		return herald.EventRow{}, fmt.Errorf("heraldpg: %q is not an event id (a UUID)", id)
	}
	var (
		ev    herald.EventRow
		found bool
	)
	err := d.db.query(ctx, `SELECT `+eventColumns+` FROM `+d.q.table+` WHERE id = $1`, []any{id},
		func(scan func(...any) error) error {
			var err error
			ev, err = scanEvent(scan)
			found = true
			return err
		})
	if err != nil {
		return ev, fmt.Errorf("heraldpg: reading event: %w", err)
	}
	if !found {
		return ev, fmt.Errorf("heraldpg: event %s: %w", id, herald.ErrNotFound)
	}
	return ev, nil
}

func scanEvent(scan func(...any) error) (herald.EventRow, error) {
	var (
		e       herald.EventRow
		headers []byte
		state   string
	)
	err := scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
		&e.Payload, &headers, &e.Attempt, &e.CreatedAt, &state, &e.AvailableAt, &e.LeaseUntil,
		&e.ClaimedBy, &e.PublishedAt, &e.DeadAt, &e.LastError)
	e.State = herald.State(state)
	e.Headers = sqlstore.DecodeHeaders(headers)
	return e, err
}

// RequeueDead implements herald.Admin.
func (d *Driver) RequeueDead(ctx context.Context, f herald.EventFilter) (int, error) {
	f.State = herald.StateDead
	where, args, _, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	n, err := d.db.exec(ctx, `UPDATE `+d.q.table+`
		SET state = 'ready', attempts = 0, available_at = now(), dead_at = NULL
		WHERE `+where, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: requeueing dead events: %w", err)
	}
	return int(n), nil
}

// DiscardDead implements herald.Admin.
func (d *Driver) DiscardDead(ctx context.Context, f herald.EventFilter) (int, error) {
	f.State = herald.StateDead
	where, args, _, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	n, err := d.db.exec(ctx, `DELETE FROM `+d.q.table+` WHERE `+where, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: discarding dead events: %w", err)
	}
	return int(n), nil
}
