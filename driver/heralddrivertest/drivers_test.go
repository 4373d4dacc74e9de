package heralddrivertest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

func TestMain(m *testing.M) { heraldtest.Main(m) }

// Every driver passes the same suite, from this one file.
func TestDrivers(t *testing.T) {
	t.Parallel()
	t.Run("PostgreSQLOverPgx", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, heralddrivertest.Harness{Name: "pgx", New: newPgx})
	})
	t.Run("PostgreSQLOverDatabaseSQL", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, heralddrivertest.Harness{Name: "pgx-stdlib", New: newPgStdlib})
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, heralddrivertest.Harness{Name: "sqlite", New: newSQLite})
	})
}

const pgBackdate = `UPDATE %s SET created_at = created_at - $2 * interval '1 microsecond',
	published_at = published_at - $2 * interval '1 microsecond' WHERE id = $1`

func newPgx(t *testing.T) *heralddrivertest.Driver {
	pool := heraldtest.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: heraldtest.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	return &heralddrivertest.Driver{
		Store: store, Admin: store,
		Write: func(ctx context.Context, msgs []herald.Message, commit bool) error {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if err := w.WriteTx(ctx, tx, msgs...); err != nil {
				return err
			}
			if commit {
				return tx.Commit(ctx)
			}
			return tx.Rollback(ctx)
		},
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			_, err := pool.Exec(ctx, fmt.Sprintf(pgBackdate, store.Table()), id, d.Microseconds())
			return err
		},
	}
}

func newPgStdlib(t *testing.T) *heralddrivertest.Driver {
	db := stdlib.OpenDBFromPool(heraldtest.PostgresPool(t))
	t.Cleanup(func() { db.Close() })
	cfg := &heraldpg.Config{Schema: heraldtest.Schema(t)}
	store, err := heraldpg.NewSQL(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	w, err := heraldpg.NewSQLWriter(cfg)
	require.NoError(t, err)
	return &heralddrivertest.Driver{
		Store: store, Admin: store,
		Write: sqlWrite(db, w),
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			_, err := db.ExecContext(ctx, fmt.Sprintf(pgBackdate, store.Table()), id, d.Microseconds())
			return err
		},
	}
}

func newSQLite(t *testing.T) *heralddrivertest.Driver {
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	return &heralddrivertest.Driver{
		Store: store, Admin: store,
		Write: sqlWrite(db, w),
		// Timestamps are integer microseconds on SQLite.
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			_, err := db.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET created_at = created_at - ?2,
				published_at = published_at - ?2 WHERE id = ?1`, store.Table()), id, d.Microseconds())
			return err
		},
	}
}

func sqlWrite(db *sql.DB, w *herald.Writer[*sql.Tx]) func(context.Context, []herald.Message, bool) error {
	return func(ctx context.Context, msgs []herald.Message, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := w.WriteTx(ctx, tx, msgs...); err != nil {
			return err
		}
		if commit {
			return tx.Commit()
		}
		return tx.Rollback()
	}
}
