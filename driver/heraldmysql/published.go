package heraldmysql

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var _ heraldadmin.Published = (*Driver)(nil)

// mysqlDialect is MySQL's spelling of the published-rows query:
// timestamps are DATETIME(6) text in UTC, id lists JSON arrays. Its
// placeholders are numbered (?1, ?2) for sqlstore.PublishedQuery, which
// may use one twice; positional renumbers them into MySQL's ? before the
// query runs.
var mysqlDialect = sqlstore.Dialect{
	Param: func(n int) string { return "?" + strconv.Itoa(n) },
	InIDs: "id IN (SELECT i FROM " + strings.Replace(idListSQL, "?", "%s", 1) + ")",
	IDs:   func(ids []string) any { return jsonArray(ids) },
	Time:  func(t time.Time) any { return formatTime(t) },
}

// numbered matches a numbered placeholder of mysqlDialect.
var numbered = regexp.MustCompile(`\?[0-9]+`)

// positional rewrites a query of numbered placeholders into MySQL's
// positional ones, with its arguments in the order the placeholders
// appear (an argument used twice is passed twice). The query's text is the
// fixed fragments of sqlstore.PublishedQuery, which also names the column
// key unquoted: a reserved word in MySQL, quoted here.
func positional(query string, args []any) (string, []any, error) {
	var (
		out []any
		bad error
	)
	query = numbered.ReplaceAllStringFunc(query, func(p string) string {
		n, err := strconv.Atoi(p[1:])
		if err != nil || n < 1 || n > len(args) {
			bad = fmt.Errorf("placeholder %s of %d arguments", p, len(args))
			return p
		}
		out = append(out, args[n-1])
		return "?"
	})
	return strings.ReplaceAll(query, " key = ", " `key` = "), out, bad
}

// ListPublished implements heraldadmin.Published.
func (d *Driver) ListPublished(ctx context.Context, f heraldadmin.PublishedFilter) ([]heraldadmin.EventRow, error) {
	rest, args, err := sqlstore.PublishedQuery(f, mysqlDialect)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: %w", err)
	}
	query, args, err := positional(d.q.listPublished+rest, args)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing published events: %w", err)
	}
	out, err := d.events(ctx, query, args)
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing published events: %w", err)
	}
	return out, nil
}
