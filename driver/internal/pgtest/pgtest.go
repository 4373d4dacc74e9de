// Package pgtest opens heraldpg outboxes for tests, the same way for the
// driver suite's harnesses and for heraldpg's own tests: a migrated outbox
// in a schema of its own, with a business table ("orders", id text primary
// key) beside it, wrapped as a heralddrivertest.Driver.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// Outbox is one PostgreSQL outbox under test, over pgx.
type Outbox struct {
	Driver *heralddrivertest.Driver // for the suite and heralddrivertest.Kit
	Store  *heraldpg.Driver
	Pool   *pgxpool.Pool
	Config *heraldpg.Config // Schema always set
	Writer *herald.Writer[pgx.Tx]
}

// New migrates an outbox for cfg on pool, in a fresh schema
// (testenv.Schema) unless cfg names one.
func New(t testing.TB, pool *pgxpool.Pool, cfg heraldpg.Config) *Outbox {
	t.Helper()
	ctx := t.Context()
	if cfg.Schema == "" {
		cfg.Schema = testenv.Schema(t)
	}
	store, err := heraldpg.New(pool, &cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(&cfg)
	require.NoError(t, err)
	orders := `"` + cfg.Schema + `".orders`
	_, err = pool.Exec(ctx, `CREATE TABLE `+orders+` (id text PRIMARY KEY)`)
	require.NoError(t, err)

	q := newQueries(cfg, store.Table(), orders)
	d := &heralddrivertest.Driver{
		Store: store, Admin: store, MaxPayloadBytes: cfg.MaxPayloadBytes,
		Begin: func(ctx context.Context) (heralddrivertest.Tx, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			return pgxTx{tx: tx, w: w, record: q.record}, nil
		},
		BusinessRows: func(ctx context.Context) ([]string, error) {
			rows, _ := pool.Query(ctx, q.businessRows)
			return pgx.CollectRows(rows, pgx.RowTo[string])
		},
		InsertPlain: func(ctx context.Context, topic, key string, payload []byte, headers string) (string, error) {
			var id string
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, q.searchPath); err != nil {
					return err
				}
				query, args := q.insertPlain(topic, key, payload, headers)
				return tx.QueryRow(ctx, query, args...).Scan(&id)
			})
			return id, err
		},
		InsertVersioned: func(ctx context.Context, topic string, payload []byte, event int64, aggregate *int64) (string, error) {
			var id string
			return id, pool.QueryRow(ctx, q.insertVersioned, topic, payload, event, aggregate).Scan(&id)
		},
		Open: func(t testing.TB) herald.Store {
			s, err := heraldpg.New(testenv.PostgresPool(t), &cfg)
			require.NoError(t, err)
			return s
		},
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			tag, err := pool.Exec(ctx, q.backdate, id, d.Microseconds())
			return oneRow(id, tag.RowsAffected(), err)
		},
		OddRows: pgxOddRows(pool, store.Table(), q.table),
	}
	return &Outbox{Driver: d, Store: store, Pool: pool, Config: &cfg, Writer: w}
}

// NewSQL is New over database/sql (pgx's stdlib driver), with heraldpg's
// NewSQL store and NewSQLWriter writer. Open gives a database/sql pool too.
func NewSQL(t testing.TB, db *sql.DB, cfg heraldpg.Config) *heralddrivertest.Driver {
	t.Helper()
	ctx := t.Context()
	if cfg.Schema == "" {
		cfg.Schema = testenv.Schema(t)
	}
	store, err := heraldpg.NewSQL(db, &cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewSQLWriter(&cfg)
	require.NoError(t, err)
	orders := `"` + cfg.Schema + `".orders`
	_, err = db.ExecContext(ctx, `CREATE TABLE `+orders+` (id text PRIMARY KEY)`)
	require.NoError(t, err)

	q := newQueries(cfg, store.Table(), orders)
	return &heralddrivertest.Driver{
		Store: store, Admin: store, MaxPayloadBytes: cfg.MaxPayloadBytes,
		Begin: heralddrivertest.BeginSQL(db, w, q.record),
		BusinessRows: func(ctx context.Context) ([]string, error) {
			return queryStrings(ctx, db, q.businessRows)
		},
		InsertPlain: func(ctx context.Context, topic, key string, payload []byte, headers string) (string, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return "", err
			}
			defer tx.Rollback() // a no-op after Commit
			if _, err := tx.ExecContext(ctx, q.searchPath); err != nil {
				return "", err
			}
			var id string
			query, args := q.insertPlain(topic, key, payload, headers)
			if err := tx.QueryRowContext(ctx, query, args...).Scan(&id); err != nil {
				return "", err
			}
			return id, tx.Commit()
		},
		InsertVersioned: func(ctx context.Context, topic string, payload []byte, event int64, aggregate *int64) (string, error) {
			var id string
			return id, db.QueryRowContext(ctx, q.insertVersioned, topic, payload, event, aggregate).Scan(&id)
		},
		Open: func(t testing.TB) herald.Store {
			other := stdlib.OpenDBFromPool(testenv.PostgresPool(t))
			t.Cleanup(func() { _ = other.Close() })
			s, err := heraldpg.NewSQL(other, &cfg)
			require.NoError(t, err)
			return s
		},
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			res, err := db.ExecContext(ctx, q.backdate, id, d.Microseconds())
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			return oneRow(id, n, err)
		},
		OddRows: sqlOddRows(db, store.Table(), q.table),
	}
}

// queries is the harness's SQL for one outbox.
type queries struct {
	record, businessRows, searchPath, backdate string
	insertVersioned                            string
	table                                      string // unqualified: the plain insert relies on search_path
}

func newQueries(cfg heraldpg.Config, qualified, orders string) queries {
	table := cfg.Table
	if table == "" {
		table = "herald_outbox"
	}
	return queries{
		insertVersioned: `INSERT INTO ` + qualified + ` (topic, payload, event_version, aggregate_version)
			VALUES ($1, $2, $3, $4) RETURNING id::text`,
		record:       `INSERT INTO ` + orders + ` (id) VALUES ($1)`,
		businessRows: `SELECT id FROM ` + orders,
		searchPath:   `SET LOCAL search_path TO "` + cfg.Schema + `"`,
		// Durations travel as microseconds, as in heraldpg's own SQL. A
		// NULL published_at stays NULL.
		backdate: `UPDATE ` + qualified + ` SET
			created_at = created_at - $2 * interval '1 microsecond',
			published_at = published_at - $2 * interval '1 microsecond'
			WHERE id = $1`,
		table: table,
	}
}

// insertPlain is the README's minimal insert of a program in another
// language, with headers when given.
func (q queries) insertPlain(topic, key string, payload []byte, headers string) (string, []any) {
	if headers == "" {
		return `INSERT INTO ` + q.table + ` (topic, key, payload) VALUES ($1, $2, $3) RETURNING id::text`,
			[]any{topic, key, payload}
	}
	return `INSERT INTO ` + q.table + ` (topic, key, payload, headers) VALUES ($1, $2, $3, $4::jsonb) RETURNING id::text`,
		[]any{topic, key, payload, headers}
}

type pgxTx struct {
	tx     pgx.Tx
	w      *herald.Writer[pgx.Tx]
	record string
}

func (x pgxTx) Write(ctx context.Context, msgs ...herald.Message) error {
	return x.w.WriteTx(ctx, x.tx, msgs...)
}

func (x pgxTx) Record(ctx context.Context, id string) error {
	_, err := x.tx.Exec(ctx, x.record, id)
	return err
}

func (x pgxTx) Commit(ctx context.Context) error   { return x.tx.Commit(ctx) }
func (x pgxTx) Rollback(ctx context.Context) error { return x.tx.Rollback(ctx) }

func queryStrings(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// oneRow makes a Backdate of a missing row an error: a case that backdates
// the wrong id would otherwise test nothing.
func oneRow(id string, n int64, err error) error {
	if err == nil && n != 1 {
		err = fmt.Errorf("backdating %s changed %d rows", id, n)
	}
	return err
}
