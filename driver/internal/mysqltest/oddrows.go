package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// checks are the names of migration 001's constraints that the odd rows
// break, after the table's name and an underscore.
var checks = []string{"headers_object", "attempts_range", "times_set", "claim_has_lease", "parked_is_dead"}

// oddRow is a row of values MySQL's columns admit but Herald never
// writes: the columns it sets besides topic, key and payload, as SQL. The
// odd values of MySQL are the extremes of its types, the zero date
// ('0000-00-00', admitted where sql_mode lacks NO_ZERO_DATE) and JSON that
// is not an object.
type oddRow struct {
	want        heralddrivertest.OddRow
	cols, value string
}

var (
	published = heraldadmin.StatePublished
	dead      = heraldadmin.StateDead
)

const (
	zeroDate = "'0000-00-00 00:00:00'"
	minDate  = "'1000-01-01 00:00:00'"
	maxDate  = "'9999-12-31 23:59:59.999999'"
)

var oddRows = []oddRow{
	{heralddrivertest.OddRow{Class: "attempts at the integer maximum", Want: published, Delivered: true,
		Attempt: sqlstore.MaxAttempts}, "attempts", "2147483647"},
	{heralddrivertest.OddRow{Class: "attempts at the integer minimum", Want: published, Delivered: true, Attempt: 1},
		"attempts", "-2147483648"},
	{heralddrivertest.OddRow{Class: "created_at the zero date", Want: dead,
		Reason: "herald: unreadable row: created_at is not a date"}, "created_at", zeroDate},
	{heralddrivertest.OddRow{Class: "created_at at the earliest DATETIME", Want: published, Delivered: true, Attempt: 1},
		"created_at", minDate},
	{heralddrivertest.OddRow{Class: "created_at at the latest DATETIME", Want: published, Delivered: true, Attempt: 1},
		"created_at", maxDate},
	{heralddrivertest.OddRow{Class: "available_at the zero date", Want: published, Delivered: true, Attempt: 1},
		"available_at", zeroDate},
	{heralddrivertest.OddRow{Class: "available_at at the latest DATETIME: never due", Want: heraldadmin.StateReady},
		"available_at", maxDate},
	{heralddrivertest.OddRow{Class: "claimed with no claim token and no lease", Want: published, Delivered: true, Attempt: 1},
		"state", "'claimed'"},
	{heralddrivertest.OddRow{Class: "claimed with a lease at the zero date", Want: published, Delivered: true, Attempt: 1},
		"state, claim_token, lease_until", "'claimed', UUID(), " + zeroDate},
	{heralddrivertest.OddRow{Class: "published with no published_at, created at the zero date", Want: published},
		"state, created_at", "'published', " + zeroDate},
	{heralddrivertest.OddRow{Class: "dead, parking its key, with no dead_at", Want: dead, Reason: "written dead"},
		"state, parked, last_error", "'dead', TRUE, 'written dead'"},
	{heralddrivertest.OddRow{Class: "dead at the zero date, created and available at the latest DATETIME", Want: dead,
		Reason: "written dead"}, "state, dead_at, created_at, available_at, last_error",
		"'dead', " + zeroDate + ", " + maxDate + ", " + maxDate + ", 'written dead'"},
	{heralddrivertest.OddRow{Class: "headers a JSON array", Want: dead,
		Reason: "herald: unreadable row: headers are not a JSON object"}, "headers", "'[\"a\"]'"},
}

// oddRowsFunc is Driver.OddRows: it drops the checks the odd rows break
// from the outbox table (qualified; named table, unquoted) and writes
// oddRows on topic, each with a key of its own, in one transaction on a
// connection whose sql_mode admits the zero date. The connection is
// thrown away after, rather than returned to the pool with that mode.
func oddRowsFunc(db *sql.DB, qualified, table string) func(context.Context, string) ([]heralddrivertest.OddRow, error) {
	return func(ctx context.Context, topic string) ([]heralddrivertest.OddRow, error) {
		for _, c := range checks {
			if _, err := db.ExecContext(ctx, `ALTER TABLE `+qualified+" DROP CONSTRAINT `"+table+"_"+c+"`"); err != nil {
				return nil, err
			}
		}
		c, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		defer func() { _ = c.Raw(func(any) error { return driver.ErrBadConn }) }()
		if _, err := c.ExecContext(ctx, `SET SESSION sql_mode = 'STRICT_TRANS_TABLES'`); err != nil {
			return nil, err
		}
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback() // a no-op after Commit
		out := make([]heralddrivertest.OddRow, len(oddRows))
		for i, r := range oddRows {
			res, err := tx.ExecContext(ctx, `INSERT INTO `+qualified+" (topic, `key`, payload, "+r.cols+`)
				VALUES (?, ?, 'x', `+r.value+`)`, topic, fmt.Sprintf("odd-%d", i))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.want.Class, err)
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return nil, err
			}
			var id string
			if err := tx.QueryRowContext(ctx, `SELECT id FROM `+qualified+` WHERE seq = ?`, seq).Scan(&id); err != nil {
				return nil, err
			}
			out[i] = r.want
			out[i].ID = id
		}
		return out, tx.Commit()
	}
}
