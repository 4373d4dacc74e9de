package heraldsqlite

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var _ heraldadmin.Published = (*Driver)(nil)

// sqliteDialect is SQLite's spelling of the published-rows query:
// timestamps are integer microseconds, id lists JSON arrays.
var sqliteDialect = sqlstore.Dialect{
	Param: func(n int) string { return "?" + strconv.Itoa(n) },
	InIDs: "id IN (SELECT value FROM json_each(%s))",
	IDs:   func(ids []string) any { return jsonArray(ids) },
	Time:  func(t time.Time) any { return t.UnixMicro() },
}

// ListPublished implements heraldadmin.Published.
func (d *Driver) ListPublished(ctx context.Context, f heraldadmin.PublishedFilter) ([]heraldadmin.EventRow, error) {
	rest, args, err := sqlstore.PublishedQuery(f, sqliteDialect)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: %w", err)
	}
	rows, err := d.db.QueryContext(ctx, d.q.listEvents+rest, args...)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing published events: %w", err)
	}
	defer rows.Close()
	var out []heraldadmin.EventRow
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("heraldsqlite: listing published events: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing published events: %w", err)
	}
	return out, nil
}
