package heraldsqlite

import (
	"context"
	"fmt"
	"strconv"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var _ heraldadmin.Retrying = (*Driver)(nil)

// retryGroupsSQL groups the retrying events by their exact last error,
// reading the ready rows through their partial index.
var retryGroupsSQL = `SELECT last_error, count(*), count(DISTINCT topic), max(attempts), min(available_at), min(created_at)
	FROM {{.Table}} WHERE ` + sqlstore.RetryingCond("{{.Now}}") + `
	GROUP BY last_error
	ORDER BY count(*) DESC, last_error
	LIMIT ?1`

// RetryGroups implements heraldadmin.Retrying.
func (d *Driver) RetryGroups(ctx context.Context, limit int) ([]heraldadmin.RetryGroup, error) {
	if limit < 1 || limit > heraldadmin.MaxListLimit {
		return nil, fmt.Errorf("heraldsqlite: limit %d is not between 1 and %d", limit, heraldadmin.MaxListLimit)
	}
	rows, err := d.db.QueryContext(ctx, d.names.render(retryGroupsSQL), limit)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: grouping retrying events: %w", err)
	}
	defer rows.Close()
	var out []heraldadmin.RetryGroup
	for rows.Next() {
		var (
			g            heraldadmin.RetryGroup
			next, oldest micros
		)
		if err := rows.Scan(&g.LastError, &g.Count, &g.Topics, &g.MaxAttempts, &next, &oldest); err != nil {
			return nil, fmt.Errorf("heraldsqlite: grouping retrying events: %w", err)
		}
		g.NextAttempt, g.Oldest = next.time(), oldest.time()
		out = append(out, g)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: grouping retrying events: %w", err)
	}
	return out, nil
}

// ListRetrying implements heraldadmin.Retrying. Its scan follows the
// ready rows' index on (available_at, seq).
func (d *Driver) ListRetrying(ctx context.Context, f heraldadmin.RetryFilter) ([]heraldadmin.EventRow, error) {
	where, args, limit, err := sqlstore.RetryingQuery(f, sqliteDialect, nowMicros)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: %w", err)
	}
	rows, err := d.db.QueryContext(ctx, d.q.listEvents+` WHERE `+where+` ORDER BY available_at, seq LIMIT `+strconv.Itoa(limit), args...)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing retrying events: %w", err)
	}
	defer rows.Close()
	var out []heraldadmin.EventRow
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("heraldsqlite: listing retrying events: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing retrying events: %w", err)
	}
	return out, nil
}

// RetryNow implements heraldadmin.Retrying.
func (d *Driver) RetryNow(ctx context.Context, f heraldadmin.RetryFilter) (int, error) {
	if !f.All && !f.Narrowed() {
		return 0, fmt.Errorf("heraldsqlite: select the retrying events to retry now by ids, topic or last error, or all of them")
	}
	where, args, _, err := sqlstore.RetryingQuery(f, sqliteDialect, nowMicros)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: %w", err)
	}
	n, err := d.exec(ctx, d.names.render(`UPDATE {{.Table}} SET available_at = {{.Now}} WHERE `)+where+` AND available_at > `+nowMicros, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: retrying events now: %w", err)
	}
	return n, nil
}
