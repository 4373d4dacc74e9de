package heraldpg

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var _ heraldadmin.Published = (*Driver)(nil)

// pgDialect is PostgreSQL's spelling of the published-rows query.
var pgDialect = sqlstore.Dialect{
	Param: func(n int) string { return "$" + strconv.Itoa(n) },
	InIDs: "id = ANY(%s::uuid[])",
	IDs:   uuidArray,
	Time:  func(t time.Time) any { return t },
}

// ListPublished implements heraldadmin.Published. Its scan follows the
// published rows' index on published_at.
func (d *Driver) ListPublished(ctx context.Context, f heraldadmin.PublishedFilter) ([]heraldadmin.EventRow, error) {
	rest, args, err := sqlstore.PublishedQuery(f, pgDialect)
	if err != nil {
		return nil, fmt.Errorf("heraldpg: %w", err)
	}
	var out []heraldadmin.EventRow
	err = d.db.query(ctx, `SELECT `+eventColumns+` FROM `+d.q.table+rest, args, func(scan func(...any) error) error {
		ev, err := scanEvent(scan)
		out = append(out, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: listing published events: %w", err)
	}
	return out, nil
}
