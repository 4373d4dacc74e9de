package pgtest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// oddRow is a row of values PostgreSQL's column types admit but Herald
// never writes: the columns it sets besides topic, key and payload, as SQL.
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
		Attempt: sqlstore.MaxAttempts}, "attempts", "2147483647"},
	{heralddrivertest.OddRow{Class: "attempts at the integer minimum", Want: published, Delivered: true, Attempt: 1},
		"attempts", "-2147483648"},
	{heralddrivertest.OddRow{Class: "created_at at infinity", Want: dead,
		Reason: "herald: unreadable row: created_at is infinity"}, "created_at", "'infinity'"},
	{heralddrivertest.OddRow{Class: "created_at at -infinity", Want: dead,
		Reason: "herald: unreadable row: created_at is -infinity"}, "created_at", "'-infinity'"},
	{heralddrivertest.OddRow{Class: "available_at at -infinity", Want: published, Delivered: true, Attempt: 1},
		"available_at", "'-infinity'"},
	{heralddrivertest.OddRow{Class: "available_at at infinity: never due", Want: heraldadmin.StateReady},
		"available_at", "'infinity'"},
	{heralddrivertest.OddRow{Class: "claimed with no claim token and no lease", Want: published, Delivered: true, Attempt: 1},
		"state", "'claimed'"},
	{heralddrivertest.OddRow{Class: "claimed with a lease that never ends", Want: published, Delivered: true, Attempt: 1},
		"state, claim_token, lease_until", "'claimed', gen_random_uuid(), 'infinity'"},
	{heralddrivertest.OddRow{Class: "published at infinity, created at -infinity", Want: published},
		"state, published_at, created_at", "'published', 'infinity', '-infinity'"},
	{heralddrivertest.OddRow{Class: "dead, parking its key, with no dead_at", Want: dead, Reason: "written dead"},
		"state, parked, last_error", "'dead', true, 'written dead'"},
	{heralddrivertest.OddRow{Class: "dead at -infinity, created and available at infinity", Want: dead, Reason: "written dead"},
		"state, dead_at, created_at, available_at, last_error", "'dead', '-infinity', 'infinity', 'infinity', 'written dead'"},
}

// writeOddRows drops the checks of migration 004 from the outbox table
// (table is its unqualified name) and writes oddRows on topic, each with a
// key of its own.
func writeOddRows(ctx context.Context, tx oddTx, qualified, table, topic string) ([]heralddrivertest.OddRow, error) {
	drop := `ALTER TABLE ` + qualified
	for i, c := range []string{"attempts_range", "pending_times_finite", "relay_times_finite", "claim_has_lease", "parked_is_dead"} {
		if i > 0 {
			drop += ","
		}
		drop += ` DROP CONSTRAINT IF EXISTS "` + table + `_` + c + `"`
	}
	if err := tx.exec(ctx, drop); err != nil {
		return nil, err
	}
	out := make([]heralddrivertest.OddRow, len(oddRows))
	for i, r := range oddRows {
		id, err := tx.insert(ctx, `INSERT INTO `+qualified+` (topic, key, payload, `+r.cols+`)
			VALUES ($1, $2, 'x', `+r.value+`) RETURNING id::text`, topic, fmt.Sprintf("odd-%d", i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.want.Class, err)
		}
		out[i] = r.want
		out[i].ID = id
	}
	return out, nil
}

// oddTx is a transaction of either pool kind, as writeOddRows needs it.
type oddTx interface {
	exec(ctx context.Context, sql string) error
	insert(ctx context.Context, sql string, args ...any) (string, error)
}

// pgxOddRows is Driver.OddRows over a pgx pool.
func pgxOddRows(pool *pgxpool.Pool, qualified, table string) func(context.Context, string) ([]heralddrivertest.OddRow, error) {
	return func(ctx context.Context, topic string) (rows []heralddrivertest.OddRow, err error) {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			rows, err = writeOddRows(ctx, pgxOddTx{tx}, qualified, table, topic)
			return err
		})
		return rows, err
	}
}

type pgxOddTx struct{ tx pgx.Tx }

func (x pgxOddTx) exec(ctx context.Context, sql string) error {
	_, err := x.tx.Exec(ctx, sql)
	return err
}

func (x pgxOddTx) insert(ctx context.Context, sql string, args ...any) (id string, err error) {
	return id, x.tx.QueryRow(ctx, sql, args...).Scan(&id)
}

// sqlOddRows is Driver.OddRows over a database/sql pool.
func sqlOddRows(db *sql.DB, qualified, table string) func(context.Context, string) ([]heralddrivertest.OddRow, error) {
	return func(ctx context.Context, topic string) ([]heralddrivertest.OddRow, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback() // a no-op after Commit
		rows, err := writeOddRows(ctx, sqlOddTx{tx}, qualified, table, topic)
		if err != nil {
			return nil, err
		}
		return rows, tx.Commit()
	}
}

type sqlOddTx struct{ tx *sql.Tx }

func (x sqlOddTx) exec(ctx context.Context, query string) error {
	_, err := x.tx.ExecContext(ctx, query)
	return err
}

func (x sqlOddTx) insert(ctx context.Context, query string, args ...any) (id string, err error) {
	return id, x.tx.QueryRowContext(ctx, query, args...).Scan(&id)
}
