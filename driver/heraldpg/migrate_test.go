package heraldpg_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
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
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.Config.Schema+`.herald_outbox_migrations`).Scan(&versions))
		files, err := filepath.Glob("migrations/*.sql")
		require.NoError(t, err)
		require.Equal(t, len(files), versions, "one row per migration")
	})

	t.Run("ConcurrentMigrationsAllSucceed", func(t *testing.T) {
		t.Parallel()
		pool := testenv.PostgresPool(t)
		cfg := &heraldpg.Config{Schema: testenv.Schema(t), Table: "events"}
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				d, err := heraldpg.New(pool, cfg)
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
		d, err := heraldpg.New(pool, cfg)
		require.NoError(t, err)
		require.NoError(t, d.Ping(ctx))
	})

	t.Run("PingRefusesAnUnmigratedTable", func(t *testing.T) {
		t.Parallel()
		d, err := heraldpg.New(testenv.PostgresPool(t), &heraldpg.Config{Schema: testenv.Schema(t)})
		require.NoError(t, err)
		require.ErrorContains(t, d.Ping(ctx), "herald migrate")
	})

	t.Run("RefusesASchemaNewerThanItKnows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.Pool.Exec(ctx, `INSERT INTO `+b.Config.Schema+`.herald_outbox_migrations (version, name) VALUES (999, 'future')`)
		require.NoError(t, err)
		require.ErrorContains(t, b.Store.Migrate(ctx), "newer than this Herald knows")
		require.ErrorContains(t, b.Store.Ping(ctx), "newer than this Herald knows")
	})

	t.Run("RefusesBadNamesBeforeAnySQL", func(t *testing.T) {
		t.Parallel()
		for _, cfg := range []heraldpg.Config{
			{Schema: "Public"}, {Schema: "a-b"}, {Table: `x"; DROP TABLE y; --`}, {Table: "1abc"},
			{Table: "a b"}, {Schema: "abcdefghijabcdefghijabcdefghijabcdefghijX"},
		} {
			_, err := heraldpg.New(testenv.PostgresPool(t), &cfg)
			require.Error(t, err, "%+v", cfg)
			_, err = heraldpg.NewWriter(&cfg)
			require.Error(t, err, "%+v", cfg)
		}
		_, err := heraldpg.New(nil, nil)
		require.Error(t, err)
	})
}
