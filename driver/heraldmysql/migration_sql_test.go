package heraldmysql_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/internal/mysqltest"
)

// The script MigrationSQL prints, run statement by statement as a
// migration tool does, makes the tables Migrate makes, at the version
// Herald expects; from an older table it brings the rest.
func TestMigrationSQLMakesWhatMigrateMakes(t *testing.T) {
	t.Parallel()
	db := mysqltest.Pool(t)
	fresh := func() (*heraldmysql.Config, *heraldmysql.Driver) {
		cfg := &heraldmysql.Config{Database: mysqltest.Database(t, db), Table: "events"}
		d, err := heraldmysql.New(db, cfg)
		require.NoError(t, err)
		return cfg, d
	}
	cfg, migrated := fresh()
	require.NoError(t, migrated.Migrate(t.Context()))

	scriptedCfg, scripted := fresh()
	script, err := heraldmysql.MigrationSQL(scriptedCfg, 0)
	require.NoError(t, err)
	run(t, db, script)
	require.NoError(t, scripted.Ping(t.Context()), "the script records every version")
	require.Equal(t, tables(t, db, cfg.Database), tables(t, db, scriptedCfg.Database))
	require.NoError(t, scripted.Migrate(t.Context()), "Migrate finds nothing left to do")
	run(t, db, script) // and the script runs again without harm

	olderCfg, older := fresh()
	require.NoError(t, older.MigrateFirst(t.Context(), 1))
	rest, err := heraldmysql.MigrationSQL(olderCfg, 1)
	require.NoError(t, err)
	require.NotContains(t, rest, "-- migration 1:")
	run(t, db, rest)
	require.NoError(t, older.Ping(t.Context()))
	require.Equal(t, tables(t, db, cfg.Database), tables(t, db, olderCfg.Database))

	_, err = heraldmysql.MigrationSQL(nil, 99)
	require.ErrorContains(t, err, "is not between 0 and")
}

// run runs a script's statements one at a time on one connection. A
// statement that ran already (the script run twice) may only fail on the
// version row it records again.
func run(t *testing.T, db *sql.DB, script string) {
	t.Helper()
	c, err := db.Conn(t.Context())
	require.NoError(t, err)
	defer c.Close()
	for _, st := range heraldmysql.Statements(script) {
		if _, err := c.ExecContext(t.Context(), st); err != nil {
			require.ErrorContains(t, err, "Duplicate entry", st)
		}
	}
}

// tables returns each table of database with its columns' definitions.
func tables(t *testing.T, db *sql.DB, database string) map[string][]string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), `SELECT table_name, CONCAT_WS(' ', column_name, column_type, is_nullable, column_default)
		FROM information_schema.columns WHERE table_schema = ? ORDER BY table_name, ordinal_position`, database)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var table, col string
		require.NoError(t, rows.Scan(&table, &col))
		out[table] = append(out[table], col)
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, 4, "the outbox, its migrations, pauses and relays: %v", out)
	return out
}
