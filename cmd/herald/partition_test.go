package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

func relkind(t *testing.T, schema, table string) string {
	t.Helper()
	var k string
	require.NoError(t, testenv.PostgresPool(t).QueryRow(context.Background(),
		`SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)`, `"`+schema+`".`+table).Scan(&k))
	return k
}

// herald migrate --partition creates the table partitioned; a plain table
// that exists is converted only by --partition-existing, keeping its rows.
func TestMigratePartition(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	d := db{flags: []string{"--db", testenv.PostgresDSN(t), "--schema", schema}, schema: schema}
	r := d.cli(t, "migrate", "--partition", "--partition-interval", "1h", "--partition-ahead", "2")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, fmt.Sprintf(`^migrate: created partitioned outbox table %q\."herald_outbox" at schema version \d+ \(by created_at, 1h a partition, 2 created ahead\)\n$`, schema), r.stdout)
	require.Equal(t, "p", relkind(t, schema, "herald_outbox"))
	r = d.cli(t, "migrate")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "is up to date")

	plain := setup(t)
	plain.exec(t, `INSERT INTO %s.herald_outbox (topic, payload) VALUES ('orders', 'x')`)
	r = plain.cli(t, "migrate", "--partition")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "--partition-existing")
	r = plain.cli(t, "migrate", "--partition-existing")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "is partitioned by created_at")
	require.Equal(t, "p", relkind(t, plain.schema, "herald_outbox"))
	r = plain.cli(t, "status")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "total: 1 ready")
}

func TestMigratePartitionRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--partition", "--partition-interval", "1s"}, "Partitioning.Interval"},
		{[]string{"--partition", "--partition-ahead", "0"}, "must be positive"},
		{[]string{"--partition", "--partition-ahead", "101"}, "Partitioning.Ahead"},
		{[]string{"--partition-ahead", "5"}, "go with --partition"},
		{[]string{"--partition", "--print-sql"}, "--print-sql prints the plain table's"},
		{[]string{"--partition", "--db", "sqlite:" + t.TempDir() + "/x.db"}, "PostgreSQL only"},
	} {
		args := append([]string{"migrate"}, c.args...)
		if c.args[len(c.args)-2] != "--db" {
			args = append(args, "--db", "postgres://u@127.0.0.1:1/db")
		}
		r := cli(t, nil, args...)
		require.Equal(t, 2, r.code, "%v: %v", c.args, r)
		require.Contains(t, r.stderr, c.want, c.args)
	}
}
