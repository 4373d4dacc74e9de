package heraldmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var _ heraldadmin.Retrying = (*Driver)(nil)

// now is the database clock in the retrying queries.
const now = `UTC_TIMESTAMP(6)`

// retryGroupsSQL groups the retrying events by their exact last error,
// reading the ready rows through the ready index (led by the state), never
// the published ones. It groups by a hash of the error: MySQL groups and
// sorts TEXT by its first max_sort_length bytes only, which would merge
// errors that differ further on; every error of a group is the same text,
// so MIN returns it.
var retryGroupsSQL = `SELECT MIN(last_error), COUNT(*), COUNT(DISTINCT topic), MAX(attempts), MIN(available_at), MIN(created_at)
	FROM {{.Table}} FORCE INDEX ({{.Name}}_ready_idx)
	WHERE ` + sqlstore.RetryingCond(now) + `
	GROUP BY SHA2(last_error, 256)
	ORDER BY COUNT(*) DESC, MIN(last_error)
	LIMIT ?`

// RetryGroups implements heraldadmin.Retrying.
func (d *Driver) RetryGroups(ctx context.Context, limit int) ([]heraldadmin.RetryGroup, error) {
	if limit < 1 || limit > heraldadmin.MaxListLimit {
		return nil, fmt.Errorf("heraldmysql: limit %d is not between 1 and %d", limit, heraldadmin.MaxListLimit)
	}
	var out []heraldadmin.RetryGroup
	err := collect(ctx, d.db, d.names.render(retryGroupsSQL), []any{limit}, func(rows *sql.Rows) error {
		var (
			g            heraldadmin.RetryGroup
			next, oldest datetime
		)
		if err := rows.Scan(&g.LastError, &g.Count, &g.Topics, &g.MaxAttempts, &next, &oldest); err != nil {
			return err
		}
		g.NextAttempt, g.Oldest = next.time(), oldest.time()
		out = append(out, g)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: grouping retrying events: %w", err)
	}
	return out, nil
}

// ListRetrying implements heraldadmin.Retrying. Its scan follows the ready
// index's (available_at, seq) order.
func (d *Driver) ListRetrying(ctx context.Context, f heraldadmin.RetryFilter) ([]heraldadmin.EventRow, error) {
	where, args, limit, err := sqlstore.RetryingQuery(f, mysqlDialect, now)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: %w", err)
	}
	query, args, err := positional(d.q.listPublished+` WHERE `+where+` ORDER BY available_at, seq LIMIT `+strconv.Itoa(limit), args)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing retrying events: %w", err)
	}
	out, err := d.events(ctx, query, args)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing retrying events: %w", err)
	}
	return out, nil
}

// RetryNow implements heraldadmin.Retrying: one UPDATE in a READ COMMITTED
// transaction, which passes the ready rows it does not change without
// keeping them locked (a claim's rows among them).
func (d *Driver) RetryNow(ctx context.Context, f heraldadmin.RetryFilter) (int, error) {
	if !f.All && !f.Narrowed() {
		return 0, errors.New("heraldmysql: select the retrying events to retry now by ids, topic or last error, or all of them")
	}
	where, args, _, err := sqlstore.RetryingQuery(f, mysqlDialect, now)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: %w", err)
	}
	query, args, err := positional(d.names.render(`UPDATE {{.Table}} SET available_at = `+now+` WHERE `)+where+
		` AND available_at > `+now, args)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: retrying events now: %w", err)
	}
	n, err := d.execTx(ctx, query, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: retrying events now: %w", err)
	}
	return n, nil
}
