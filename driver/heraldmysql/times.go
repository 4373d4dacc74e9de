package heraldmysql

import (
	"time"
)

// datetimeLayout is how a DATETIME(6) travels as text: in UTC, which is
// what every timestamp of the outbox table is.
const datetimeLayout = "2006-01-02 15:04:05.999999"

// formatTime is t as a DATETIME(6) parameter. Times go to the server as
// text in UTC rather than as time.Time, which go-sql-driver would render
// in the DSN's loc.
func formatTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000000") }

// datetime scans a DATETIME column, whatever the DSN: with parseTime a
// time.Time whose wall clock go-sql-driver read in the DSN's loc (the
// value is UTC, so the wall clock is taken as UTC), without it the text.
// A zero date ('0000-00-00'), which MySQL admits without NO_ZERO_DATE, or
// anything else unreadable, is no time at all rather than an error that
// would fail the read of every row beside it.
type datetime struct {
	t     time.Time
	valid bool
}

// Scan implements sql.Scanner.
func (d *datetime) Scan(src any) error {
	d.t, d.valid = time.Time{}, false
	switch v := src.(type) {
	case time.Time:
		if !v.IsZero() {
			d.t = time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC)
			d.valid = true
		}
	case []byte:
		d.parse(string(v))
	case string:
		d.parse(v)
	}
	return nil
}

func (d *datetime) parse(s string) {
	t, err := time.ParseInLocation(datetimeLayout, s, time.UTC)
	if err == nil && !t.IsZero() {
		d.t, d.valid = t, true
	}
}

// time returns the time, the zero time when there is none.
func (d datetime) time() time.Time { return d.t }

// ptr returns the time, nil when there is none.
func (d datetime) ptr() *time.Time {
	if !d.valid {
		return nil
	}
	t := d.t
	return &t
}
