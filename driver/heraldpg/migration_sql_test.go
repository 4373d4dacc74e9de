package heraldpg_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The script MigrationSQL prints, run by another tool, makes the same table
// Migrate makes: the same columns, indexes and constraints, and the version
// Herald expects. From an older table it brings the rest.
func TestMigrationSQLMakesWhatMigrateMakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)

	byMigrate := &heraldpg.Config{Schema: testenv.Schema(t), Table: "events"}
	d, err := heraldpg.New(pool, byMigrate)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))

	byScript := &heraldpg.Config{Schema: testenv.Schema(t), Table: "events"}
	script, err := heraldpg.MigrationSQL(byScript, 0)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(script, "-- Herald outbox table"), script)
	_, err = pool.Exec(ctx, script) // no arguments: the simple protocol, every statement
	require.NoError(t, err)
	s, err := heraldpg.New(pool, byScript)
	require.NoError(t, err)
	require.NoError(t, s.Ping(ctx), "the script records every version")
	current, latest, err := s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, latest, current)
	require.Equal(t, catalog(t, pool, byMigrate.Schema), catalog(t, pool, byScript.Schema))
	require.NoError(t, s.Migrate(ctx), "Migrate finds nothing left to do")

	// From version 2, the script brings the rest.
	older := &heraldpg.Config{Schema: testenv.Schema(t), Table: "events"}
	o, err := heraldpg.New(pool, older)
	require.NoError(t, err)
	require.NoError(t, o.MigrateTo(ctx, 2))
	rest, err := heraldpg.MigrationSQL(older, 2)
	require.NoError(t, err)
	require.NotContains(t, rest, "-- migration 1:")
	_, err = pool.Exec(ctx, rest)
	require.NoError(t, err)
	require.NoError(t, o.Ping(ctx))
	require.Equal(t, catalog(t, pool, byMigrate.Schema), catalog(t, pool, older.Schema))

	for _, from := range []int{-1, latest + 1} {
		_, err := heraldpg.MigrationSQL(byScript, from)
		require.ErrorContains(t, err, "is not between 0 and")
	}
	_, err = heraldpg.MigrationSQL(&heraldpg.Config{Table: "Bad Name"}, 0)
	require.Error(t, err)
}

// catalog describes a schema's tables: columns, indexes and constraints,
// with the schema's name taken out.
func catalog(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'column ' || table_name || '.' || column_name || ' ' || data_type || ' ' || coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1
		UNION ALL
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = $1
		UNION ALL
		SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(c.oid)
		FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1
		ORDER BY 1`, schema)
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, strings.ReplaceAll(s, schema, "SCHEMA"))
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}
