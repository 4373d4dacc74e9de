package heraldmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Status implements heraldadmin.Admin. It counts every row, so it reads the
// whole table: an operator's tool, not something to poll every second.
func (d *Driver) Status(ctx context.Context) (heraldadmin.Status, error) {
	var st heraldadmin.Status
	err := collect(ctx, d.db, d.q.status, nil, func(rows *sql.Rows) error {
		var (
			ts    heraldadmin.TopicStatus
			state string
			ageUS float64
		)
		if err := rows.Scan(&ts.Topic, &state, &ts.Count, &ageUS); err != nil {
			return err
		}
		ts.State = heraldadmin.State(state)
		ts.Oldest = sqlstore.Age(ageUS, time.Microsecond)
		st.Topics = append(st.Topics, ts)
		if (ts.State == heraldadmin.StateReady || ts.State == heraldadmin.StateClaimed) && ts.Oldest > st.OldestPending {
			st.OldestPending = ts.Oldest
		}
		return nil
	})
	if err != nil {
		return heraldadmin.Status{}, fmt.Errorf("heraldmysql: reading status: %w", err)
	}
	return st, nil
}

// selection is an operator's checked filter as SQL: a FROM clause (the
// table aliased o, joined to the ids when there are any) and a WHERE
// clause, with their arguments in order, and the listing's limit.
type selection struct {
	from, where string
	args        []any
	limit       int
}

func (d *Driver) selection(f heraldadmin.EventFilter) (selection, error) {
	sel, err := sqlstore.Select(f)
	if err != nil {
		return selection{}, fmt.Errorf("heraldmysql: %w", err)
	}
	s := selection{from: d.q.fromTable, where: ` WHERE o.state = ?`, limit: sel.Limit}
	switch {
	case len(sel.IDs) > 0:
		s.from = d.q.fromIDs
		s.args = []any{jsonArray(sel.IDs), string(sel.State)}
	case sel.Topic != "":
		s.where += ` AND o.topic = ?`
		s.args = []any{string(sel.State), sel.Topic}
	default:
		s.args = []any{string(sel.State)}
	}
	return s, nil
}

// ListEvents implements heraldadmin.Admin.
func (d *Driver) ListEvents(ctx context.Context, f heraldadmin.EventFilter) ([]heraldadmin.EventRow, error) {
	s, err := d.selection(f)
	if err != nil {
		return nil, err
	}
	out, err := d.events(ctx, `SELECT `+eventColumns+` FROM `+s.from+s.where+` ORDER BY o.seq LIMIT `+strconv.Itoa(s.limit), s.args)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing events: %w", err)
	}
	return out, nil
}

// events reads whole rows.
func (d *Driver) events(ctx context.Context, query string, args []any) ([]heraldadmin.EventRow, error) {
	var out []heraldadmin.EventRow
	err := collect(ctx, d.db, query, args, func(rows *sql.Rows) error {
		ev, err := scanEvent(rows)
		out = append(out, ev)
		return err
	})
	return out, err
}

// canonicalID returns id as stored: a UUID in lower-case canonical text.
func canonicalID(id string) (string, error) {
	u, err := uuid.Parse(id)
	if err != nil {
		return "", fmt.Errorf("heraldmysql: %q is not an event id (a UUID)", id)
	}
	return u.String(), nil
}

// GetEvent implements heraldadmin.Admin.
func (d *Driver) GetEvent(ctx context.Context, id string) (heraldadmin.EventRow, error) {
	cid, err := canonicalID(id)
	if err != nil {
		return heraldadmin.EventRow{}, err
	}
	rows, err := d.events(ctx, d.q.getEvent, []any{cid})
	if err != nil {
		return heraldadmin.EventRow{}, fmt.Errorf("heraldmysql: reading event: %w", err)
	}
	if len(rows) == 0 {
		return heraldadmin.EventRow{}, fmt.Errorf("heraldmysql: event %s: %w", cid, heraldadmin.ErrNotFound)
	}
	return rows[0], nil
}

// scanEvent reads a whole row for operators and tests. It shows any row,
// whatever another program wrote in it: see datetime for timestamps,
// sqlstore.DisplayHeaders for headers.
func scanEvent(rows *sql.Rows) (heraldadmin.EventRow, error) {
	var (
		e                      heraldadmin.EventRow
		headers                []byte
		state                  string
		created, available     datetime
		lease, published, dead datetime
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

// RequeueDead implements heraldadmin.Admin.
func (d *Driver) RequeueDead(ctx context.Context, f heraldadmin.EventFilter) (int, error) {
	f.State = heraldadmin.StateDead
	s, err := d.selection(f)
	if err != nil {
		return 0, err
	}
	n, err := d.execTx(ctx, `UPDATE `+s.from+requeueSetSQL+s.where, s.args...)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: requeueing dead events: %w", err)
	}
	return n, nil
}

// DiscardDead implements heraldadmin.Admin. Without f.Resume it first checks,
// in the same transaction and holding the rows, that no selected row parks
// a key with events waiting behind it.
func (d *Driver) DiscardDead(ctx context.Context, f heraldadmin.EventFilter) (int, error) {
	f.State = heraldadmin.StateDead
	s, err := d.selection(f)
	if err != nil {
		return 0, err
	}
	var n int
	err = d.inTx(ctx, func(tx *sql.Tx) error {
		if !f.Resume {
			parked, err := blockedKeys(ctx, tx, d.q.blockedKeys+s.from+s.where+d.q.waitingBehind+blockedKeysOrderSQL+` FOR UPDATE`,
				append(s.args, 100)...)
			if err != nil {
				return err
			}
			if len(parked) > 0 {
				return &heraldadmin.ParkedError{Keys: parked}
			}
		}
		var err error
		n, err = execN(ctx, tx, `DELETE o FROM `+s.from+s.where, s.args...)
		return err
	})
	var pe *heraldadmin.ParkedError
	if errors.As(err, &pe) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: discarding dead events: %w", err)
	}
	return n, nil
}

// Backlog implements heraldadmin.Admin.
func (d *Driver) Backlog(ctx context.Context) ([]heraldadmin.TopicBacklog, error) {
	var out []heraldadmin.TopicBacklog
	err := collect(ctx, d.db, d.q.backlog, nil, func(rows *sql.Rows) error {
		var (
			b     heraldadmin.TopicBacklog
			ageUS float64
		)
		if err := rows.Scan(&b.Topic, &b.Ready, &b.Claimed, &b.Dead, &b.ParkedKeys, &ageUS); err != nil {
			return err
		}
		b.OldestPending = sqlstore.Age(ageUS, time.Microsecond)
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: reading the backlog: %w", err)
	}
	return out, nil
}

// BlockedKeys implements heraldadmin.Admin.
func (d *Driver) BlockedKeys(ctx context.Context, limit int) ([]heraldadmin.BlockedKey, error) {
	if limit <= 0 {
		limit = 100
	}
	keys, err := blockedKeys(ctx, d.db, d.q.blockedKeys+d.q.fromTable+` WHERE o.state = 'dead'`+blockedKeysOrderSQL, limit)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing blocked keys: %w", err)
	}
	return keys, nil
}

func blockedKeys(ctx context.Context, q queryer, query string, args ...any) ([]heraldadmin.BlockedKey, error) {
	var out []heraldadmin.BlockedKey
	err := collect(ctx, q, query, args, func(rows *sql.Rows) error {
		var (
			k     heraldadmin.BlockedKey
			since datetime
		)
		err := rows.Scan(&k.Topic, &k.Key, &k.EventID, &since, &k.Waiting)
		k.Since = since.time()
		out = append(out, k)
		return err
	})
	return out, err
}
