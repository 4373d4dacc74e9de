package heraldpg

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// PostgreSQL timestamps may be infinity or -infinity, which no time.Time
// holds: a row another program wrote with one must still be read. Every
// timestamp column is scanned as a pgtype.Timestamptz, which takes them,
// over pgx and over database/sql alike.

// endOfTime stands for infinity where a row is shown to operators: the last
// instant that RFC 3339 and JSON can write. -infinity shows as the zero
// time, the first.
var endOfTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)

// finite returns the time of a column the relay needs (created_at of a
// claimed row), or why there is none.
func finite(column string, ts pgtype.Timestamptz) (time.Time, error) {
	switch {
	case !ts.Valid:
		return time.Time{}, fmt.Errorf("%s is NULL", column)
	case ts.InfinityModifier == pgtype.Infinity:
		return time.Time{}, fmt.Errorf("%s is infinity", column)
	case ts.InfinityModifier == pgtype.NegativeInfinity:
		return time.Time{}, fmt.Errorf("%s is -infinity", column)
	}
	return ts.Time, nil
}

// shown returns a timestamp for operators: infinity as endOfTime,
// -infinity and NULL as the zero time.
func shown(ts pgtype.Timestamptz) time.Time {
	switch {
	case !ts.Valid, ts.InfinityModifier == pgtype.NegativeInfinity:
		return time.Time{}
	case ts.InfinityModifier == pgtype.Infinity:
		return endOfTime
	}
	return ts.Time
}

// shownPtr is shown for a column that may be NULL, which stays nil.
func shownPtr(ts pgtype.Timestamptz) *time.Time {
	if !ts.Valid {
		return nil
	}
	t := shown(ts)
	return &t
}
