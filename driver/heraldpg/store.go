package heraldpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

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
	return sqlstore.Claim(ctx, "heraldpg", p, sqlstore.Claimers{
		Unordered: func(ctx context.Context, p herald.ClaimParams) ([]sqlstore.ClaimedRow, error) {
			if d.fair != nil {
				// A fair claim walks the keys, every one free, as the
				// claim with paused topics does: taking the oldest events
				// first is what makes a backlog hold back the rest.
				return d.claimOrdered(ctx, p, min(cmp.Or(max(p.PerKey, 0), p.Limit), p.Limit))
			}
			args := []any{p.Limit, p.Token, p.Owner, p.Lease.Microseconds(), p.MaxBytes}
			if !d.claimsPartitioned(ctx) {
				return d.claimRows(ctx, d.db, d.q.claim, p.Limit, args)
			}
			var rows []sqlstore.ClaimedRow
			err := d.inClaimTx(ctx, noSortSQL, func(tx claimTx) error {
				var err error
				rows, err = d.claimRows(ctx, lastQuery{tx}, d.q.claim, p.Limit, args)
				return err
			})
			return rows, err
		},
		Ordered: d.claimOrdered,
	})
}

// claimOrdered runs the two statements of an ordered claim (see
// walkKeysSQL) in one transaction. The walk starts where the last one
// stopped, so every key gets its turn; when it reaches the last key it
// starts over from the first within the same claim.
func (d *Driver) claimOrdered(ctx context.Context, p herald.ClaimParams, perKey int) ([]sqlstore.ClaimedRow, error) {
	unordered, paused := p.UnorderedTopics, p.PausedTopics
	if unordered == nil {
		unordered = []string{}
	}
	if paused == nil {
		paused = []string{}
	}
	maxKeys := max(sqlstore.WalkKeysFactor*p.Limit, 64)

	var (
		claimed    []sqlstore.ClaimedRow
		leasesOnly bool
	)
	set := ""
	if d.claimsPartitioned(ctx) {
		set = noSortSQL
	}
	if err := d.fairIndexReady(ctx); err != nil {
		return nil, err
	}
	err := d.inClaimTx(ctx, set, func(tx claimTx) error {
		var (
			topics, keys []string
			free         []bool
			done         func([]sqlstore.ClaimedRow)
			err          error
		)
		if d.fair != nil {
			topics, keys, free, done, err = d.walkFair(ctx, tx, p, perKey, unordered, paused, maxKeys)
		} else {
			topics, keys, free, err = d.walkKeys(ctx, tx, p, perKey, unordered, paused, maxKeys)
		}
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			if done != nil {
				done(nil)
			}
			return nil
		}
		args := []any{topics, keys, free, perKey, p.Limit, p.Token, p.Owner, p.Lease.Microseconds(), p.MaxBytes}
		if d.leaseKeys {
			args = append(args, d.leaseMin)
		}
		claimed, err = d.claimRows(ctx, lastQuery{tx}, d.q.claimKeys, p.Limit, args)
		leasesOnly = err == nil && d.leaseKeys && len(claimed) > 0 && !claimedRows(claimed, topics, keys, free, d.leaseMin)
		if err == nil && done != nil {
			done(claimed)
		}
		return err
	})
	if err == nil && leasesOnly {
		d.leaseOnly.add(p.Token, time.Now().Add(p.Lease))
	}
	return claimed, err
}

// walkKeys is the ordered claim's walk (walkKeysSQL) from the driver's
// cursor: the keys to claim, and whether each is free (taken without a
// lock: keyless, of an unordered topic, or every key of an unordered
// claim).
func (d *Driver) walkKeys(ctx context.Context, tx querier, p herald.ClaimParams, perKey int, unordered, paused []string,
	maxKeys int) (topics, keys []string, free []bool, err error) {
	seen := map[[2]string]bool{}
	err = d.cursor.Walk(maxKeys, p.Limit, func(from [2]string) (visited, rows int, last [2]string, err error) {
		err = tx.query(ctx, d.q.walkKeys, []any{from[0], from[1], maxKeys, p.Limit, perKey, unordered, d.lockSpace, paused, p.Unordered},
			func(scan func(...any) error) error {
				var (
					k    [2]string
					ok   bool
					size int
				)
				if err := scan(&k[0], &k[1], &ok, &size); err != nil {
					return err
				}
				visited, rows, last = visited+1, rows+size, k
				if ok && !seen[k] {
					seen[k] = true
					topics, keys = append(topics, k[0]), append(keys, k[1])
					free = append(free, p.Unordered || k[1] == "" || slices.Contains(unordered, k[0]))
				}
				return nil
			})
		return visited, rows, last, err
	})
	return topics, keys, free, err
}

// claimRows runs a claim statement and scans the rows it returns. A row
// another program wrote may hold what no Envelope can (created_at at
// infinity, a header that is a number): it comes back marked unreadable,
// for sqlstore.Claim to dispose of, instead of failing the claim.
func (d *Driver) claimRows(ctx context.Context, c querier, sql string, limit int, args []any) ([]sqlstore.ClaimedRow, error) {
	var rows []sqlstore.ClaimedRow
	err := c.query(ctx, sql, args, func(scan func(...any) error) error {
		var (
			r       sqlstore.ClaimedRow
			headers []byte
			created pgtype.Timestamptz
		)
		if err := scan(&r.ID, &r.Seq, &r.Topic, &r.Key, &r.Type, &r.AggregateType, &r.AggregateID,
			&r.EventVersion, &r.AggregateVersion, &r.Payload, &headers, &r.Attempt, &created); err != nil {
			return err
		}
		var err error
		if r.Headers, err = sqlstore.DecodeHeaders(headers); err != nil {
			r.Unreadable = err.Error()
		}
		if r.CreatedAt, err = finite("created_at", created); err != nil {
			r.Unreadable = err.Error()
		}
		if rows == nil { // sized on the first row: an empty claim allocates nothing
			rows = make([]sqlstore.ClaimedRow, 0, min(limit, 1000))
		}
		rows = append(rows, r)
		return nil
	})
	return rows, err
}

// Complete implements herald.Store in one statement.
func (d *Driver) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	var res herald.CompleteResult
	if len(p.Failed) == 0 {
		if len(p.Published) == 0 {
			return res, nil
		}
		sql := d.q.publish
		if p.Delete {
			sql = d.q.publishDelete
		}
		args := []any{uuidArray(p.Published), p.Token}
		if d.leaseKeys {
			args = append(args, d.leaseOnly.hasRows(p.Token))
		}
		n, err := d.changed(ctx, d.leaseKeys, sql, args...)
		if err != nil {
			return res, fmt.Errorf("heraldpg: acknowledging batch: %w", err)
		}
		res.Published = int(n)
		return res, nil
	}
	w, sql := sqlstore.NewWrites(p), d.q.complete
	if p.Delete {
		sql = d.q.completeDelete
	}
	args := []any{uuidArray(w.IDs), p.Token, w.Published, w.Dead, w.Park, w.Refund, w.DelayUS, w.Error}
	if d.leaseKeys {
		args = append(args, d.leaseOnly.hasRows(p.Token))
	}
	err := d.db.query(ctx, sql, args,
		func(scan func(...any) error) error {
			var (
				id        string
				published bool
			)
			if err := scan(&id, &published); err != nil {
				return err
			}
			if published {
				res.Published++
			} else {
				res.Failed = append(res.Failed, id)
			}
			return nil
		})
	if err != nil {
		return res, fmt.Errorf("heraldpg: acknowledging batch: %w", err)
	}
	return res, nil
}

// ReleaseClaim implements herald.Store.
func (d *Driver) ReleaseClaim(ctx context.Context, token string) (int, error) {
	n, err := d.changed(ctx, d.leaseKeys, d.q.releaseClaim, token)
	if err == nil {
		d.leaseOnly.forget(token)
	}
	if err != nil {
		return 0, fmt.Errorf("heraldpg: releasing a claim: %w", err)
	}
	return int(n), nil
}

// changed runs a statement that changes rows and returns how many: as
// the count it selects when counted (the statements that handle leases,
// whose rows are changed by several of their parts), or else as the rows
// the statement changed.
func (d *Driver) changed(ctx context.Context, counted bool, sql string, args ...any) (int64, error) {
	if !counted {
		return d.db.exec(ctx, sql, args...)
	}
	var n int64
	err := queryRow(ctx, d.db, sql, args, &n)
	return n, err
}

// RescueExpired implements herald.Store: rows claimed, and keys leased
// (key leases, the default), whose lease ran out.
func (d *Driver) RescueExpired(ctx context.Context, limit int) (int, error) {
	n, err := d.changed(ctx, true, d.q.rescue, limit)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: rescuing expired leases: %w", err)
	}
	return int(n), nil
}

// DeletePublished implements herald.Store. It deletes, too, the streamed
// rows (change-data-capture) created more than olderThan ago, within the
// same limit, after the published ones.
//
// On a partitioned table it runs MaintainPartitions: partitions ahead,
// drops of the partitions whose rows are all done (published, streamed or
// dead), and row deletes only where no drop reaches. It returns the rows
// that went both ways.
func (d *Driver) DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	if limit >= 0 {
		if l, err := d.layout(ctx, d.db); err != nil {
			return 0, err
		} else if l.partitioned {
			rep, err := d.maintain(ctx, time.Time{}, olderThan, limit)
			n := int(rep.DroppedRows) + rep.Deleted
			if err != nil || olderThan < 0 || rep.Deleted >= limit {
				return n, err
			}
			m, err := d.db.exec(ctx, d.q.deleteStreamed, olderThan.Microseconds(), limit-rep.Deleted)
			if err != nil {
				return n, fmt.Errorf("heraldpg: deleting streamed rows: %w", err)
			}
			return n + int(m), nil
		}
	}
	n, err := d.db.exec(ctx, d.q.deletePublished, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: deleting published rows: %w", err)
	}
	return int(n), nil
}

// Status implements heraldadmin.Admin. It counts every row, so it reads the
// whole table: an operator's tool, not something to poll every second.
func (d *Driver) Status(ctx context.Context) (heraldadmin.Status, error) {
	var st heraldadmin.Status
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return st, err
	}
	sql := d.q.status
	if l.partitioned {
		sql = d.q.statusPart
	}
	err = d.db.query(ctx, sql, nil, func(scan func(...any) error) error {
		var (
			ts    heraldadmin.TopicStatus
			state string
			age   float64
		)
		if err := scan(&ts.Topic, &state, &ts.Count, &age); err != nil {
			return err
		}
		ts.State = heraldadmin.State(state)
		ts.Oldest = sqlstore.Age(age, time.Second)
		st.Topics = append(st.Topics, ts)
		if (ts.State == heraldadmin.StateReady || ts.State == heraldadmin.StateClaimed) && ts.Oldest > st.OldestPending {
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
func filterSQL(f heraldadmin.EventFilter) (string, []any, int, error) {
	sel, err := sqlstore.Select(f)
	if err != nil {
		return "", nil, 0, fmt.Errorf("heraldpg: %w", err)
	}
	where, args := "state = $1", []any{string(sel.State)}
	switch {
	case len(sel.IDs) > 0:
		where += " AND id = ANY($2::uuid[])"
		args = append(args, uuidArray(sel.IDs))
	case sel.Topic != "":
		where += " AND topic = $2"
		args = append(args, sel.Topic)
	}
	return where, args, sel.Limit, nil
}

// ListEvents implements heraldadmin.Admin.
func (d *Driver) ListEvents(ctx context.Context, f heraldadmin.EventFilter) ([]heraldadmin.EventRow, error) {
	where, args, limit, err := filterSQL(f)
	if err != nil {
		return nil, err
	}
	sql := `SELECT ` + eventColumns + ` FROM ` + d.q.events + ` WHERE ` + viewWhere(where, f.State) +
		` ORDER BY seq LIMIT ` + strconv.Itoa(limit)
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return nil, err
	}
	if l.partitioned && f.State == heraldadmin.StateDead {
		sql = `SELECT * FROM ((SELECT ` + eventColumns + ` FROM ` + d.q.table + ` WHERE ` + where +
			` ORDER BY seq LIMIT ` + strconv.Itoa(limit) + `) UNION ALL (SELECT ` + eventColumns + ` FROM ` +
			d.q.dead + ` WHERE ` + where + ` ORDER BY seq LIMIT ` + strconv.Itoa(limit) + `)) u ORDER BY seq LIMIT ` +
			strconv.Itoa(limit)
	}
	var out []heraldadmin.EventRow
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

// GetEvent implements heraldadmin.Admin.
func (d *Driver) GetEvent(ctx context.Context, id string) (heraldadmin.EventRow, error) {
	if !validUUID(id) {
		return heraldadmin.EventRow{}, fmt.Errorf("heraldpg: %q is not an event id (a UUID)", id)
	}
	var (
		ev    heraldadmin.EventRow
		found bool
	)
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return ev, err
	}
	sql := `SELECT ` + eventColumns + ` FROM ` + d.q.events + ` WHERE id = $1`
	if l.partitioned {
		sql += ` UNION ALL SELECT ` + eventColumns + ` FROM ` + d.q.dead + ` WHERE id = $1`
	}
	err = d.db.query(ctx, sql+` LIMIT 1`, []any{id},
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
		return ev, fmt.Errorf("heraldpg: event %s: %w", id, heraldadmin.ErrNotFound)
	}
	return ev, nil
}

// scanEvent reads a whole row for operators and tests. It shows any row,
// whatever another program wrote in it: see shown for timestamps at
// infinity, sqlstore.DisplayHeaders for headers.
func scanEvent(scan func(...any) error) (heraldadmin.EventRow, error) {
	var (
		e                      heraldadmin.EventRow
		headers                []byte
		state                  string
		created, available     pgtype.Timestamptz
		lease, published, dead pgtype.Timestamptz
	)
	err := scan(&e.ID, &e.Seq, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID,
		&e.EventVersion, &e.AggregateVersion, &e.Payload, &headers, &e.Attempt, &created, &state, &available, &lease,
		&e.ClaimedBy, &published, &dead, &e.LastError, &e.Parked)
	e.State = heraldadmin.State(state)
	e.Headers = sqlstore.DisplayHeaders(headers)
	e.CreatedAt, e.AvailableAt = shown(created), shown(available)
	e.LeaseUntil, e.PublishedAt, e.DeadAt = shownPtr(lease), shownPtr(published), shownPtr(dead)
	return e, err
}

// RequeueDead implements heraldadmin.Admin.
func (d *Driver) RequeueDead(ctx context.Context, f heraldadmin.EventFilter) (int, error) {
	f.State = heraldadmin.StateDead
	where, args, _, err := filterSQL(f)
	if err != nil {
		return 0, err
	}
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return 0, err
	}
	requeue := `UPDATE ` + d.q.table + `
		SET state = 'ready', attempts = 0, available_at = now(), dead_at = NULL, parked = false,
		    created_at = CASE WHEN isfinite(created_at) THEN created_at ELSE now() END
		WHERE ` + where
	var n int64
	if !l.partitioned {
		n, err = d.db.exec(ctx, requeue, args...)
	} else {
		n, err = d.requeueDeadTable(ctx, requeue, where, args)
	}
	if err != nil {
		return 0, fmt.Errorf("heraldpg: requeueing dead events: %w", err)
	}
	return int(n), nil
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
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return 0, err
	}
	var n int64
	err = d.db.inTx(ctx, func(tx conn) error {
		if !f.Resume {
			// Only a key with events waiting behind its dead event needs
			// Resume: with none, discarding and unparking are the same.
			parked, err := d.blockedKeys(ctx, tx, `SELECT d.topic, d.key, d.id, d.dead_at,
				(SELECT count(*) FROM `+d.q.table+` w WHERE w.state = 'ready' AND w.topic = d.topic AND w.key = d.key)
				FROM `+d.q.table+` d WHERE d.parked AND `+where+`
				AND EXISTS (SELECT 1 FROM `+d.q.table+` w WHERE w.state = 'ready' AND w.topic = d.topic AND w.key = d.key)
				ORDER BY d.dead_at, d.seq LIMIT 100 FOR UPDATE OF d`, args)
			if err != nil {
				return err
			}
			if len(parked) > 0 {
				return &heraldadmin.ParkedError{Keys: parked}
			}
		}
		var err error
		n, err = tx.exec(ctx, `DELETE FROM `+d.q.table+` WHERE `+where, args...)
		if err != nil || !l.partitioned {
			return err
		}
		m, err := tx.exec(ctx, `DELETE FROM `+d.q.dead+` WHERE `+where, args...)
		n += m
		return err
	})
	var pe *heraldadmin.ParkedError
	if errors.As(err, &pe) {
		return 0, err
	}
	if err != nil {
		return 0, fmt.Errorf("heraldpg: discarding dead events: %w", err)
	}
	return int(n), nil
}

// Backlog implements heraldadmin.Admin.
func (d *Driver) Backlog(ctx context.Context) ([]heraldadmin.TopicBacklog, error) {
	var out []heraldadmin.TopicBacklog
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return nil, err
	}
	sql := d.q.backlog
	if l.partitioned {
		sql = d.q.backlogPart
	}
	err = d.db.query(ctx, sql, nil, func(scan func(...any) error) error {
		var (
			b   heraldadmin.TopicBacklog
			age float64
		)
		if err := scan(&b.Topic, &b.Ready, &b.Claimed, &b.Dead, &b.ParkedKeys, &age); err != nil {
			return err
		}
		b.OldestPending = sqlstore.Age(age, time.Second)
		out = append(out, b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: reading the backlog: %w", err)
	}
	return out, nil
}

// BlockedKeys implements heraldadmin.Admin.
func (d *Driver) BlockedKeys(ctx context.Context, limit int) ([]heraldadmin.BlockedKey, error) {
	if limit <= 0 {
		limit = 100
	}
	keys, err := d.blockedKeys(ctx, d.db, d.q.blockedKeys, []any{limit})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: listing blocked keys: %w", err)
	}
	return keys, nil
}

func (d *Driver) blockedKeys(ctx context.Context, c conn, sql string, args []any) ([]heraldadmin.BlockedKey, error) {
	var out []heraldadmin.BlockedKey
	err := c.query(ctx, sql, args, func(scan func(...any) error) error {
		var (
			k     heraldadmin.BlockedKey
			since pgtype.Timestamptz
		)
		err := scan(&k.Topic, &k.Key, &k.EventID, &since, &k.Waiting)
		k.Since = shown(since)
		out = append(out, k)
		return err
	})
	return out, err
}

// requeueDeadTable requeues dead events on a partitioned table: those
// still in the outbox by requeue, and those of dropped partitions by moving
// them back from the dead-letter table, ready, in one transaction. They keep
// their id, seq and created_at, so they go to the partition of their time,
// or the default one.
func (d *Driver) requeueDeadTable(ctx context.Context, requeue, where string, args []any) (int64, error) {
	var n int64
	err := d.db.inTx(ctx, func(tx conn) error {
		var err error
		if n, err = tx.exec(ctx, requeue, args...); err != nil {
			return err
		}
		cols, err := d.deadColumns(ctx, tx)
		if err != nil {
			return err
		}
		sel := make([]string, 0, 24)
		for _, c := range strings.Split(cols, ", ") {
			switch c {
			case "state":
				c = `'ready'`
			case "attempts":
				c = `0`
			case "available_at":
				c = `now()`
			case "dead_at", "claim_token", "lease_until", "claimed_by":
				c = `NULL`
			case "parked":
				c = `false`
			case "created_at":
				c = `CASE WHEN isfinite(created_at) THEN created_at ELSE now() END`
			}
			sel = append(sel, c)
		}
		m, err := tx.exec(ctx, `WITH m AS (DELETE FROM `+d.q.dead+` WHERE `+where+` RETURNING *)
			INSERT INTO `+d.q.table+` (`+cols+`) SELECT `+strings.Join(sel, ", ")+` FROM m`, args...)
		n += m
		return err
	})
	return n, err
}

// viewWhere turns filterSQL's condition on the table's state ("state =
// $1 ...") into one on eventsViewSQL's: the row's own state selects the
// rows through the table's indexes, and for ready and claimed, which a
// lease tells apart, the state operators see then decides.
func viewWhere(where string, st heraldadmin.State) string {
	if st == heraldadmin.StateReady || st == heraldadmin.StateClaimed {
		return `raw_state IN ('ready', 'claimed') AND ` + where
	}
	return "raw_" + where
}
