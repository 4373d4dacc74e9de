package heraldsqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("IsIdempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.Store.Migrate(ctx))
		require.NoError(t, b.Store.Migrate(ctx))
		require.NoError(t, b.Store.Ping(ctx))
		var versions int
		require.NoError(t, b.DB.QueryRow(`SELECT count(*) FROM herald_outbox_migrations`).Scan(&versions))
		files, err := filepath.Glob("migrations/*.sql")
		require.NoError(t, err)
		require.Equal(t, len(files), versions, "one row per migration")
	})

	t.Run("ConcurrentMigrationsFromSeveralProcessesAllSucceed", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outbox.db")
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			db := open(t, path) // one *sql.DB per "process"
			wg.Go(func() {
				d, err := heraldsqlite.New(db, &heraldsqlite.Config{Table: "events"})
				if err == nil {
					err = d.Migrate(ctx)
				}
				errs[i] = err
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		d, err := heraldsqlite.New(open(t, path), &heraldsqlite.Config{Table: "events"})
		require.NoError(t, err)
		require.NoError(t, d.Ping(ctx))
	})

	t.Run("PingRefusesAnUnmigratedTable", func(t *testing.T) {
		t.Parallel()
		d, err := heraldsqlite.New(open(t, filepath.Join(t.TempDir(), "x.db")), nil)
		require.NoError(t, err)
		require.ErrorContains(t, d.Ping(ctx), "herald migrate")
	})

	t.Run("RefusesASchemaNewerThanItKnows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO herald_outbox_migrations (version, name) VALUES (999, 'future')`)
		require.ErrorContains(t, b.Store.Migrate(ctx), "newer than this Herald knows")
		require.ErrorContains(t, b.Store.Ping(ctx), "newer than this Herald knows")
		// The refused migration left no transaction open on the pool.
		b.exec(t, `DELETE FROM herald_outbox_migrations WHERE version = 999`)
		require.NoError(t, b.Store.Migrate(ctx))
	})

	t.Run("TablesWithOtherNamesLiveSideBySide", func(t *testing.T) {
		t.Parallel()
		db := open(t, filepath.Join(t.TempDir(), "x.db"))
		for _, name := range []string{"a", "order", "herald_outbox"} {
			d, err := heraldsqlite.New(db, &heraldsqlite.Config{Table: name})
			require.NoError(t, err)
			require.NoError(t, d.Migrate(ctx))
			require.NoError(t, d.Ping(ctx))
		}
	})

	t.Run("RefusesBadNamesBeforeAnySQL", func(t *testing.T) {
		t.Parallel()
		db := open(t, filepath.Join(t.TempDir(), "x.db"))
		for _, cfg := range []heraldsqlite.Config{
			{Table: "Outbox"}, {Table: "a-b"}, {Table: `x"; DROP TABLE y; --`}, {Table: "1abc"},
			{Table: "a b"}, {Table: "abcdefghijabcdefghijabcdefghijabcdefghijX"}, {Table: "sqlite_outbox"},
			{MaxPayloadBytes: -1},
		} {
			_, err := heraldsqlite.New(db, &cfg)
			require.Error(t, err, "%+v", cfg)
			_, err = heraldsqlite.NewWriter(&cfg)
			require.Error(t, err, "%+v", cfg)
			require.Error(t, cfg.Validate(), "%+v", cfg)
		}
		_, err := heraldsqlite.New(nil, nil)
		require.Error(t, err)
	})
}
