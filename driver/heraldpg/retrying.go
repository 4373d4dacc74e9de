package heraldpg

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var _ heraldadmin.Retrying = (*Driver)(nil)

// retryGroupsSQL groups the retrying events by their exact last error. The
// ready rows are read through their partial index, never the published
// ones.
var retryGroupsSQL = `SELECT last_error, count(*), count(DISTINCT topic), max(attempts), min(available_at), min(created_at)
	FROM {{.Table}} WHERE ` + sqlstore.RetryingCond("now()") + `
	GROUP BY last_error
	ORDER BY count(*) DESC, last_error
	LIMIT $1`

// RetryGroups implements heraldadmin.Retrying.
func (d *Driver) RetryGroups(ctx context.Context, limit int) ([]heraldadmin.RetryGroup, error) {
	if limit < 1 || limit > heraldadmin.MaxListLimit {
		return nil, fmt.Errorf("heraldpg: limit %d is not between 1 and %d", limit, heraldadmin.MaxListLimit)
	}
	var out []heraldadmin.RetryGroup
	err := d.db.query(ctx, d.names.render(retryGroupsSQL), []any{limit}, func(scan func(...any) error) error {
		var (
			g            heraldadmin.RetryGroup
			next, oldest pgtype.Timestamptz
			attempts     int32
		)
		if err := scan(&g.LastError, &g.Count, &g.Topics, &attempts, &next, &oldest); err != nil {
			return err
		}
		g.MaxAttempts, g.NextAttempt, g.Oldest = int(attempts), shown(next), shown(oldest)
		out = append(out, g)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: grouping retrying events: %w", err)
	}
	return out, nil
}

// ListRetrying implements heraldadmin.Retrying. Its scan follows the
// ready rows' index on (available_at, seq).
func (d *Driver) ListRetrying(ctx context.Context, f heraldadmin.RetryFilter) ([]heraldadmin.EventRow, error) {
	where, args, limit, err := sqlstore.RetryingQuery(f, pgDialect, "now()")
	if err != nil {
		return nil, fmt.Errorf("heraldpg: %w", err)
	}
	var out []heraldadmin.EventRow
	sql := `SELECT ` + eventColumns + ` FROM ` + d.q.table + ` WHERE ` + where +
		` ORDER BY available_at, seq LIMIT ` + strconv.Itoa(limit)
	err = d.db.query(ctx, sql, args, func(scan func(...any) error) error {
		ev, err := scanEvent(scan)
		out = append(out, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: listing retrying events: %w", err)
	}
	return out, nil
}

// RetryNow implements heraldadmin.Retrying.
func (d *Driver) RetryNow(ctx context.Context, f heraldadmin.RetryFilter) (int, error) {
	if !f.All && !f.Narrowed() {
		return 0, fmt.Errorf("heraldpg: select the retrying events to retry now by ids, topic or last error, or all of them")
	}
	where, args, _, err := sqlstore.RetryingQuery(f, pgDialect, "now()")
	if err != nil {
		return 0, fmt.Errorf("heraldpg: %w", err)
	}
	n, err := d.db.exec(ctx, `UPDATE `+d.q.table+` SET available_at = now() WHERE `+where+` AND available_at > now()`, args...)
	if err != nil {
		return 0, fmt.Errorf("heraldpg: retrying events now: %w", err)
	}
	return int(n), nil
}
