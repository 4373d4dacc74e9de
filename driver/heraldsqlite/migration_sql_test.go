package heraldsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

// The script MigrationSQL prints, run by another tool, makes the schema
// Migrate makes, at the version Herald expects; from an older table it
// brings the rest.
func TestMigrationSQLMakesWhatMigrateMakes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(name string) (*sql.DB, *heraldsqlite.Driver) {
		db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), name))
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		d, err := heraldsqlite.New(db, &heraldsqlite.Config{Table: "events"})
		require.NoError(t, err)
		return db, d
	}
	migrated, d := open("migrate.db")
	require.NoError(t, d.Migrate(ctx))

	scripted, s := open("script.db")
	script, err := heraldsqlite.MigrationSQL(&heraldsqlite.Config{Table: "events"}, 0)
	require.NoError(t, err)
	execScript(t, scripted, script)
	require.NoError(t, s.Ping(ctx), "the script records every version")
	require.Equal(t, schemaOf(t, migrated), schemaOf(t, scripted))
	require.NoError(t, s.Migrate(ctx), "Migrate finds nothing left to do")

	older, o := open("older.db")
	require.NoError(t, o.MigrateTo(ctx, 2))
	rest, err := heraldsqlite.MigrationSQL(&heraldsqlite.Config{Table: "events"}, 2)
	require.NoError(t, err)
	require.NotContains(t, rest, "-- migration 1:")
	execScript(t, older, rest)
	require.NoError(t, o.Ping(ctx))
	require.Equal(t, schemaOf(t, migrated), schemaOf(t, older))

	_, err = heraldsqlite.MigrationSQL(nil, 99)
	require.ErrorContains(t, err, "is not between 0 and")
}

// execScript runs a script on one connection, as a migration tool does.
func execScript(t *testing.T, db *sql.DB, script string) {
	t.Helper()
	c, err := db.Conn(context.Background())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.ExecContext(context.Background(), script)
	require.NoError(t, err)
}

// schemaOf lists the database's tables, indexes and triggers as SQLite
// stores their definitions.
func schemaOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query(`SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema ORDER BY type, name`)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, strings.Join(strings.Fields(s), " "))
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}
