package main

import (
	"database/sql"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/internal/testenv"
)

// herald migrate, status, dead list and the migration script on a
// mysql:// DSN, against the test server.
func TestMySQLDSN(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", testenv.MySQL(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	t.Run("MigrateStatusAndDeadLetters", func(t *testing.T) {
		t.Parallel()
		database := testenv.MySQLDatabase(t, db)
		dsn := testenv.MySQLURL(t, database)
		r := cli(t, nil, "status", "--db", dsn)
		require.Equal(t, 1, r.code, r)
		require.Contains(t, r.stderr, "herald migrate", "an unmigrated table says to migrate")

		r = cli(t, nil, "migrate", "--db", dsn)
		require.Equal(t, 0, r.code, r)
		require.Equal(t, "migrate: created outbox table `herald_outbox` at schema version 6\n", r.stdout)
		r = cli(t, nil, "migrate", "--db", dsn)
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "is up to date (schema version 6)")

		_, err := db.ExecContext(t.Context(), "INSERT INTO `"+database+"`.herald_outbox (topic, `key`, payload) VALUES ('orders', 'a', 'x'), ('orders', 'b', 'x')")
		require.NoError(t, err)
		_, err = db.ExecContext(t.Context(), "INSERT INTO `"+database+"`.herald_outbox (topic, payload, state, dead_at, last_error) VALUES ('billing', 'x', 'dead', UTC_TIMESTAMP(6), 'boom')")
		require.NoError(t, err)

		r = cli(t, nil, "status", "--db", dsn)
		require.Equal(t, 0, r.code, r)
		require.Regexp(t, `(?m)^orders\s+ready\s+2\s`, r.stdout)
		require.Contains(t, r.stdout, "total: 2 ready, 0 claimed, 0 published, 1 dead")

		r = cli(t, map[string]string{"HERALD_DB": dsn}, "status", "--json")
		require.Equal(t, 0, r.code, r)
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		require.Empty(t, st.Schema, "the database is the schema, named in the DSN")
		require.EqualValues(t, 2, st.Totals["ready"])
		require.EqualValues(t, 1, st.Totals["dead"])

		r = cli(t, nil, "dead", "list", "--db", dsn)
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "boom")
	})

	t.Run("PrintSQLIsWhatMigrateRuns", func(t *testing.T) {
		t.Parallel()
		database := testenv.MySQLDatabase(t, db)
		dsn := testenv.MySQLURL(t, database) + "?timeout=5s"
		r := cli(t, nil, "migrate", "--print-sql", "--db", dsn, "--table", "events")
		require.Equal(t, 0, r.code, r)
		require.NotContains(t, r.stdout, "BEGIN", "MySQL commits DDL on its own: no transaction to pretend")
		// Another tool runs the script; herald then finds the table at
		// its version.
		c, err := db.Conn(t.Context())
		require.NoError(t, err)
		defer c.Close()
		_, err = c.ExecContext(t.Context(), "USE `"+database+"`")
		require.NoError(t, err)
		for _, st := range sqlStatements(r.stdout) {
			_, err := c.ExecContext(t.Context(), st)
			require.NoError(t, err, st)
		}
		r = cli(t, nil, "migrate", "--db", dsn, "--table", "events")
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "is up to date")
		r = cli(t, nil, "status", "--db", dsn, "--table", "events")
		require.Equal(t, 0, r.code, r)
	})

	t.Run("AMissingDatabaseIsReportedWithoutThePassword", func(t *testing.T) {
		t.Parallel()
		const secret = "hunter2-MySQL"
		r := cli(t, nil, "status", "--db", "mysql://nobody:"+secret+"@"+mysqlAddr(t)+"/no_such_db")
		require.Equal(t, 1, r.code, r)
		require.NotContains(t, r.stdout+r.stderr, secret)
		require.Contains(t, r.stderr, "nobody@")
	})
}

// mysqlAddr is the test server's host:port.
func mysqlAddr(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQL(t))
	require.NoError(t, err)
	return cfg.Addr
}

// sqlStatements splits a printed migration script into its statements,
// each ending with a semicolon at the end of a line, as a migration tool
// that runs one statement at a time does.
func sqlStatements(script string) []string {
	var (
		out []string
		b   strings.Builder
	)
	for line := range strings.SplitSeq(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		b.WriteString(line + "\n")
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(b.String()), ";"))
			b.Reset()
		}
	}
	return out
}

// The commands send each statement in one round trip unless the URL says
// otherwise, or picks a character set of its own.
func TestMySQLInterpolatesParametersUnlessTheURLSays(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query string
		want  bool
	}{
		{"", true},
		{"?timeout=5s", true},
		{"?interpolateParams=false", false},
		{"?interpolateParams=true", true},
		{"?charset=utf8mb4", false},
		{"?collation=utf8mb4_bin", false},
	} {
		fs := newFlagSet("status")
		flags := addDBFlags(fs)
		*flags.db = "mysql://root:secret@127.0.0.1:3306/test" + tc.query
		inv := &invocation{stderr: &redactor{w: io.Discard}, flags: fs}
		d, err := flags.parseDB(inv, false)
		require.NoError(t, err, tc.query)
		require.Equal(t, tc.want, d.spec.Target().(*heraldmysql.DSNConfig).MySQL.InterpolateParams, tc.query)
	}
}
