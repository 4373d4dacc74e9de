package sqlitetest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// oddRow is a row of values SQLite's columns admit but Herald never
// writes: the columns it sets besides topic, key and payload, as SQL.
// SQLite keeps whatever type a value comes with, so the odd values are
// integers at their extremes and text or REALs where integers belong.
type oddRow struct {
	want        heralddrivertest.OddRow
	cols, value string
}

var (
	published = heraldadmin.StatePublished
	dead      = heraldadmin.StateDead
)

var oddRows = []oddRow{
	{heralddrivertest.OddRow{Class: "attempts at the integer maximum", Want: published, Delivered: true,
		Attempt: sqlstore.MaxAttempts}, "attempts", "9223372036854775807"},
	{heralddrivertest.OddRow{Class: "attempts at the integer minimum", Want: published, Delivered: true, Attempt: 1},
		"attempts", "-9223372036854775808"},
	{heralddrivertest.OddRow{Class: "created_at at the integer minimum", Want: published, Delivered: true, Attempt: 1},
		"created_at", "-9223372036854775808"},
	{heralddrivertest.OddRow{Class: "created_at at the integer maximum", Want: published, Delivered: true, Attempt: 1},
		"created_at", "9223372036854775807"},
	{heralddrivertest.OddRow{Class: "available_at at the integer minimum", Want: published, Delivered: true, Attempt: 1},
		"available_at", "-9223372036854775808"},
	{heralddrivertest.OddRow{Class: "available_at at the integer maximum: never due", Want: heraldadmin.StateReady},
		"available_at", "9223372036854775807"},
	{heralddrivertest.OddRow{Class: "claimed with no claim token and no lease", Want: published, Delivered: true, Attempt: 1},
		"state", "'claimed'"},
	{heralddrivertest.OddRow{Class: "claimed with a lease written as text", Want: published, Delivered: true, Attempt: 1},
		"state, claim_token, lease_until", "'claimed', 'token', 'never'"},
	{heralddrivertest.OddRow{Class: "ready with a lease written as text", Want: published, Delivered: true, Attempt: 1},
		"lease_until", "'tomorrow'"},
	{heralddrivertest.OddRow{Class: "last_error a BLOB", Want: published, Delivered: true, Attempt: 1},
		"last_error", "x'00ff'"},
	{heralddrivertest.OddRow{Class: "payload an integer", Want: published, Delivered: true, Attempt: 1},
		"payload", "42"},
	{heralddrivertest.OddRow{Class: "published, published_at written as text", Want: published},
		"state, published_at", "'published', 'yesterday'"},
	{heralddrivertest.OddRow{Class: "dead, parking its key, with no dead_at", Want: dead, Reason: "written dead"},
		"state, parked, last_error", "'dead', 1, 'written dead'"},
	{heralddrivertest.OddRow{Class: "dead, dead_at a REAL", Want: dead, Reason: "written dead"},
		"state, dead_at, last_error", "'dead', 1.5, 'written dead'"},
}

// oddRowsFunc is Driver.OddRows: it drops the triggers of migration 004
// from the outbox table (named table, unquoted) and writes oddRows on
// topic, each with a key of its own, in one transaction.
func oddRowsFunc(db *sql.DB, table string) func(context.Context, string) ([]heralddrivertest.OddRow, error) {
	return func(ctx context.Context, topic string) ([]heralddrivertest.OddRow, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback() // a no-op after Commit
		for _, trigger := range []string{"checked_insert", "checked_update"} {
			if _, err := tx.ExecContext(ctx, `DROP TRIGGER IF EXISTS "`+table+`_`+trigger+`"`); err != nil {
				return nil, err
			}
		}
		out := make([]heralddrivertest.OddRow, len(oddRows))
		for i, r := range oddRows {
			var id string
			err := tx.QueryRowContext(ctx, `INSERT INTO "`+table+`" (topic, key, payload, `+r.cols+`)
				VALUES (?, ?, x'78', `+r.value+`) RETURNING id`, topic, fmt.Sprintf("odd-%d", i)).Scan(&id)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.want.Class, err)
			}
			out[i] = r.want
			out[i].ID = id
		}
		return out, tx.Commit()
	}
}
