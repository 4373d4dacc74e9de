package sqlstore

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald/heraldadmin"
)

// RetryingCond is the condition of a retrying event (heraldadmin.Retrying)
// given the database clock's expression now: a ready row with a last
// error that spent an attempt or waits out an outage. It starts with
// state = 'ready' so that the ready rows' partial indexes serve it.
func RetryingCond(now string) string {
	return "state = 'ready' AND last_error IS NOT NULL AND last_error <> '' AND (attempts > 0 OR available_at > " + now + ")"
}

// RetryingQuery checks f and builds the WHERE clause of a query on
// retrying events (without the word WHERE), its arguments, and the
// listing's limit: only the conditions f sets, each a fixed fragment with
// a placeholder, never f's text.
func RetryingQuery(f heraldadmin.RetryFilter, d Dialect, now string) (string, []any, int, error) {
	limit := cmp.Or(f.Limit, 100)
	if limit < 0 || limit > heraldadmin.MaxListLimit {
		return "", nil, 0, fmt.Errorf("limit %d is not between 1 and %d", limit, heraldadmin.MaxListLimit)
	}
	var (
		where strings.Builder
		args  []any
	)
	add := func(cond string, v any) {
		args = append(args, v)
		fmt.Fprintf(&where, " AND "+cond, d.Param(len(args)))
	}
	where.WriteString(RetryingCond(now))
	if len(f.IDs) > 0 {
		ids := make([]string, 0, len(f.IDs))
		for _, id := range f.IDs {
			u, err := uuid.Parse(id)
			if err != nil {
				return "", nil, 0, fmt.Errorf("%q is not an event id (a UUID)", id)
			}
			ids = append(ids, u.String())
		}
		add(d.InIDs, d.IDs(ids))
	}
	if f.Topic != "" {
		add("topic = %s", f.Topic)
	}
	if f.LastError != "" {
		add("last_error = %s", f.LastError)
	}
	return where.String(), args, limit, nil
}
