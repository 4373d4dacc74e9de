package pgtest

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/internal/pgodd"
)

// writeOddRows drops the checks of migration 004 from the outbox table
// (table is its unqualified name) and writes oddRows on topic, each with a
// key of its own.
func writeOddRows(ctx context.Context, tx oddTx, qualified, table, topic string) ([]heralddrivertest.OddRow, error) {
	drop := `ALTER TABLE ` + qualified
	for i, c := range pgodd.Checks {
		if i > 0 {
			drop += ","
		}
		drop += ` DROP CONSTRAINT IF EXISTS "` + table + `_` + c + `"`
	}
	if err := tx.exec(ctx, drop); err != nil {
		return nil, err
	}
	out := make([]heralddrivertest.OddRow, len(pgodd.Rows))
	for i, r := range pgodd.Rows {
		id, err := tx.insert(ctx, `INSERT INTO `+qualified+` (topic, key, payload, `+r.Cols+`)
			VALUES ($1, $2, 'x', `+r.Value+`) RETURNING id::text`, topic, fmt.Sprintf("odd-%d", i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Want.Class, err)
		}
		out[i] = r.Want
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
