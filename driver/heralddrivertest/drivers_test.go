package heralddrivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

// TestMain is goleak.VerifyTestMain plus stopping the throwaway PostgreSQL
// cluster, when one was started, before looking for leaks.
func TestMain(m *testing.M) { heraldtest.Main(m) }

// Every driver passes the same suite, from this one file. Each PostgreSQL
// harness shares one pool between its cases (a pool per case would hold
// dozens of connections at once on a large machine); each case still gets
// a schema of its own.
func TestDrivers(t *testing.T) {
	t.Parallel()
	t.Run("PostgreSQLOverPgx", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgxHarness(heraldtest.PostgresPool(t)))
	})
	t.Run("PostgreSQLOverDatabaseSQL", func(t *testing.T) {
		t.Parallel()
		db := stdlib.OpenDBFromPool(heraldtest.PostgresPool(t))
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		heralddrivertest.Exercise(t, pgSQLHarness(db))
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, sqliteHarness())
	})
}

// pgBackdate moves a row back in time; durations travel as microseconds, as
// in heraldpg's own SQL. NULL published_at stays NULL.
const pgBackdate = `UPDATE %s SET
	created_at = created_at - $2 * interval '1 microsecond',
	published_at = published_at - $2 * interval '1 microsecond'
	WHERE id = $1`

func pgxHarness(pool *pgxpool.Pool) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx", New: func(t *testing.T) *heralddrivertest.Driver {
		cfg := &heraldpg.Config{Schema: heraldtest.Schema(t)}
		store, err := heraldpg.New(pool, cfg)
		require.NoError(t, err)
		require.NoError(t, store.Migrate(t.Context()))
		w, err := heraldpg.NewWriter(cfg)
		require.NoError(t, err)
		backdate := fmt.Sprintf(pgBackdate, store.Table())
		return &heralddrivertest.Driver{
			Store: store, Admin: store,
			Write: func(ctx context.Context, msgs []herald.Message, commit bool) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) // a no-op after Commit
				if err := w.WriteTx(ctx, tx, msgs...); err != nil {
					return err
				}
				if !commit {
					return tx.Rollback(ctx)
				}
				return tx.Commit(ctx)
			},
			Backdate: func(ctx context.Context, id string, d time.Duration) error {
				tag, err := pool.Exec(ctx, backdate, id, d.Microseconds())
				return oneRow(id, tag.RowsAffected(), err)
			},
		}
	}}
}

func pgSQLHarness(db *sql.DB) heralddrivertest.Harness {
	// Above the default cap: proves the writer honours its Config.
	const maxPayload = 3 << 19
	return heralddrivertest.Harness{Name: "pgx-stdlib", New: func(t *testing.T) *heralddrivertest.Driver {
		cfg := &heraldpg.Config{Schema: heraldtest.Schema(t), MaxPayloadBytes: maxPayload}
		store, err := heraldpg.NewSQL(db, cfg)
		require.NoError(t, err)
		require.NoError(t, store.Migrate(t.Context()))
		w, err := heraldpg.NewSQLWriter(cfg)
		require.NoError(t, err)
		return &heralddrivertest.Driver{
			Store: store, Admin: store, MaxPayloadBytes: maxPayload,
			Write:    sqlWrite(db, w),
			Backdate: sqlBackdate(db, fmt.Sprintf(pgBackdate, store.Table())),
		}
	}}
}

func sqliteHarness() heralddrivertest.Harness {
	const maxPayload = 3 << 19
	return heralddrivertest.Harness{Name: "sqlite", New: func(t *testing.T) *heralddrivertest.Driver {
		db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		cfg := &heraldsqlite.Config{MaxPayloadBytes: maxPayload}
		store, err := heraldsqlite.New(db, cfg)
		require.NoError(t, err)
		require.NoError(t, store.Migrate(t.Context()))
		w, err := heraldsqlite.NewWriter(cfg)
		require.NoError(t, err)
		return &heralddrivertest.Driver{
			Store: store, Admin: store, MaxPayloadBytes: maxPayload,
			Write: sqlWrite(db, w),
			// Timestamps are INTEGER microseconds since the Unix epoch
			// (heraldsqlite's migrations/001); ids lower-case text.
			Backdate: sqlBackdate(db, `UPDATE `+store.Table()+` SET
				created_at = created_at - ?2,
				published_at = published_at - ?2
				WHERE id = ?1`),
		}
	}}
}

func sqlWrite(db *sql.DB, w *herald.Writer[*sql.Tx]) func(context.Context, []herald.Message, bool) error {
	return func(ctx context.Context, msgs []herald.Message, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // a no-op after Commit
		if err := w.WriteTx(ctx, tx, msgs...); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback()
		}
		return tx.Commit()
	}
}

// sqlBackdate runs query with the id and the duration in microseconds.
func sqlBackdate(db *sql.DB, query string) func(context.Context, string, time.Duration) error {
	return func(ctx context.Context, id string, d time.Duration) error {
		res, err := db.ExecContext(ctx, query, id, d.Microseconds())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		return oneRow(id, n, err)
	}
}

// oneRow makes a Backdate of a missing row an error: a case that backdates
// the wrong id would otherwise test nothing.
func oneRow(id string, n int64, err error) error {
	if err == nil && n != 1 {
		err = fmt.Errorf("backdating %s changed %d rows", id, n)
	}
	return err
}
