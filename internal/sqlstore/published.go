package sqlstore

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald/heraldadmin"
)

// Dialect is what the published-rows query needs to know of a driver's SQL.
type Dialect struct {
	// Param is the n-th (1-based) placeholder: "$1" or "?1".
	Param func(n int) string
	// InIDs is the condition "id is one of the list in parameter %s".
	InIDs string
	// IDs and Time turn the filter's values into the driver's arguments.
	IDs  func(ids []string) any
	Time func(t time.Time) any
}

// PublishedQuery checks f and builds the WHERE clause, the ORDER BY and
// LIMIT of a ListPublished query, and its arguments: only the conditions
// f sets, each a fixed fragment with a placeholder, never f's text.
func PublishedQuery(f heraldadmin.PublishedFilter, d Dialect) (string, []any, error) {
	limit := cmp.Or(f.Limit, 100)
	if limit < 0 || limit > heraldadmin.MaxListLimit {
		return "", nil, fmt.Errorf("limit %d is not between 1 and %d", limit, heraldadmin.MaxListLimit)
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return "", nil, errors.New("the time range is empty: since must be before until")
	}
	var (
		where strings.Builder
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		fmt.Fprintf(&where, " AND "+cond, d.Param(len(args)))
	}
	where.WriteString("state = 'published'")
	if len(f.IDs) > 0 {
		ids := make([]string, 0, len(f.IDs))
		for _, id := range f.IDs {
			u, err := uuid.Parse(id)
			if err != nil {
				return "", nil, fmt.Errorf("%q is not an event id (a UUID)", id)
			}
			ids = append(ids, u.String())
		}
		add(d.InIDs, d.IDs(ids))
	}
	if f.Topic != "" {
		add("topic = %s", f.Topic)
	}
	if f.Key != nil {
		add("key = %s", *f.Key)
	}
	if f.Type != "" {
		add("type = %s", f.Type)
	}
	if !f.Since.IsZero() {
		add("created_at >= %s", d.Time(f.Since))
	}
	if !f.Until.IsZero() {
		add("created_at < %s", d.Time(f.Until))
	}
	if f.After != (heraldadmin.Position{}) {
		args = append(args, d.Time(f.After.PublishedAt), f.After.Seq)
		a, s := d.Param(len(args)-1), d.Param(len(args))
		// The first condition lets the published rows' index on
		// published_at bound the scan; the second is the exact order.
		fmt.Fprintf(&where, " AND published_at >= %s AND (published_at > %s OR (published_at = %s AND seq > %s))", a, a, a, s)
	}
	return " WHERE " + where.String() + " ORDER BY published_at, seq LIMIT " + strconv.Itoa(limit), args, nil
}
