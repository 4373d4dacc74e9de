package bench_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/bench"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The drain on MySQL, tiny: Herald's relay and the ceiling each deliver
// every event of the backlog exactly once, the JSON says which server it
// ran on, and the ratio line is printed. It creates and drops a database
// of its own on the test server.
func TestDrainOnMySQLDeliversEveryEventOnce(t *testing.T) {
	dsn := testenv.MySQL(t) // skips without a server (fails with CI=true)
	cfg, err := mysql.ParseDSN(dsn)
	require.NoError(t, err)
	url := testenv.MySQLURL(t, cfg.DBName)
	rec, remove := bench.AddRecordingSink()
	defer remove()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const events = 200
	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"drain", "--db", url, "--json", "--to", "record,jetstream",
		"--events", "200", "--keys", "20", "--batch-size", "50", "--rounds", "1"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var res struct {
		OK      bool `json:"ok"`
		Machine struct {
			MySQLVersion    string `json:"mysql_version"`
			PostgresVersion string `json:"postgres_version"`
		} `json:"machine"`
		Config struct {
			Schema string `json:"schema"`
		} `json:"config"`
		Drain struct {
			Targets     []bench.DrainTarget     `json:"targets"`
			Comparisons []bench.DrainComparison `json:"vs_ceiling"`
		} `json:"drain"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	require.NotEmpty(t, res.Machine.MySQLVersion)
	require.Empty(t, res.Machine.PostgresVersion)

	drains := rec.Drains()
	require.Len(t, drains, 2, "Herald's relay and the ceiling, one round")
	for i, counts := range drains {
		require.Len(t, counts, events, "drain %d: distinct events that arrived", i)
		for id, n := range counts {
			require.Equal(t, 1, n, "drain %d: event %s arrived %d times", i, id, n)
		}
	}
	require.Len(t, res.Drain.Targets, 4)
	for _, tg := range res.Drain.Targets {
		require.True(t, tg.Verified, "%s %s", tg.Name, tg.System)
		require.EqualValues(t, events, tg.Published, "%s %s", tg.Name, tg.System)
		if tg.Name == "jetstream" {
			require.NotNil(t, tg.StreamMessages)
			require.EqualValues(t, events, *tg.StreamMessages, "%s", tg.System)
		}
	}
	require.Len(t, res.Drain.Comparisons, 2)
	for _, c := range res.Drain.Comparisons {
		require.Greater(t, c.Median, 0.0, c.Name)
	}
	human := stderr.String()
	for _, sink := range []string{"record", "jetstream"} {
		require.Regexp(t, regexp.MustCompile(`(?m)^  `+sink+`: Herald at \d+\.\d\d of the ceiling \(median of 1 rounds; range \d+\.\d\d-\d+\.\d\d\)$`), human)
	}
	require.Contains(t, human, "MySQL")

	// The run's database is gone.
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	defer db.Close()
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?`,
		res.Config.Schema).Scan(&n))
	require.True(t, strings.HasPrefix(res.Config.Schema, "herald_bench_"), res.Config.Schema)
	require.Zero(t, n, "database %s left behind", res.Config.Schema)
}

// On MySQL only the drain runs; a bad mysql:// URL is refused in one line
// that never shows its password.
func TestMySQLRefusals(t *testing.T) {
	for _, args := range [][]string{
		{"--db", "mysql://root@127.0.0.1:3306/test"},
		{"producers", "--db", "mysql://root@127.0.0.1:3306/test"},
		{"latency", "--db", "mysql://root@127.0.0.1:3306/test"},
		{"drain", "--db", "mysql://root:hunter2@127.0.0.1:3306"},
		{"drain", "--db", "mysql://root:hunter2@127.0.0.1:3306/test?nosuchoption=1&timeout=soon"},
		{"drain", "--db", "mysql://root:hunter2@:3306/test"},
	} {
		var stdout, stderr bytes.Buffer
		code := bench.Main(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v: %s", args, stderr.String())
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%v: %q", args, stderr.String())
		require.NotContains(t, stderr.String(), "hunter2")
	}
}
