package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// doctorJSON runs herald doctor --json and decodes its findings.
func doctorJSON(t *testing.T, args ...string) (result, []finding) {
	t.Helper()
	r := cli(t, nil, append([]string{"doctor", "--json"}, args...)...)
	var found []finding
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &found), r)
	return r, found
}

func ofCheck(found []finding, check string) []finding {
	var out []finding
	for _, f := range found {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

func TestDoctorOfAMissingTableSaysToMigrateAndFails(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	flags := []string{"--db", testenv.PostgresDSN(t), "--schema", schema}
	r := cli(t, nil, append([]string{"doctor"}, flags...)...)
	require.Equal(t, 1, r.code, r)
	require.Regexp(t, `\nerror +schema +outbox table `+schema+`\.herald_outbox does not exist \(no migration applied\) +herald migrate --schema `+schema+` --table herald_outbox\n`, r.stdout)
	require.Regexp(t, `^herald: doctor: \d+ finding\(s\) are errors\n$`, r.stderr)

	// The fix it names is the fix.
	require.Equal(t, 0, cli(t, nil, append([]string{"migrate"}, flags...)...).code)
	_, found := doctorJSON(t, flags...)
	schemaFindings := ofCheck(found, heraldpg.CheckSchema)
	require.Len(t, schemaFindings, 1)
	require.Equal(t, heraldpg.SeverityOK, schemaFindings[0].Severity, schemaFindings[0])
}

// TestDoctorOfAHealthyDatabaseExitsZero runs on a cluster of its own: a
// shared test server may run with autovacuum off, or hold slots.
func TestDoctorOfAHealthyDatabaseExitsZero(t *testing.T) {
	t.Parallel()
	c := testenv.PrivateCluster(t)
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", c.DSN).code)
	r, found := doctorJSON(t, "--db", c.DSN)
	require.Equal(t, 0, r.code, r)
	var checks []string
	for _, f := range found {
		require.Equal(t, heraldpg.SeverityOK, f.Severity, f)
		checks = append(checks, f.Check)
	}
	require.Equal(t, []string{"schema", "xmin_horizon", "autovacuum", "replication_slots", "clock"}, checks)

	// The JSON's keys are the documented ones.
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	for key := range raw[0] {
		require.Contains(t, []string{"severity", "check", "message", "fix"}, key)
	}
	require.Len(t, raw[0], 4)

	r = cli(t, nil, "doctor", "--db", c.DSN)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `\nSEVERITY +CHECK +FINDING +FIX\nok +schema +outbox table public\.herald_outbox is at schema version \d+, this herald's +-\n`, r.stdout)
}

func TestDoctorNamesATransactionHoldingTheHorizonWithoutSecrets(t *testing.T) {
	t.Parallel()
	d := setup(t)
	const secret = "Hunter2-doctor-pw"
	dsn := testenv.PostgresDSN(t)
	require.Contains(t, dsn, "postgres@", "the test puts a password into the DSN")
	withPassword := strings.Replace(dsn, "postgres@", "postgres:"+secret+"@", 1)

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var pid int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	// The query quotes the DSN's password with no keyword before it:
	// herald.Scrub cannot tell it, the redactor knows it.
	_, err = tx.Exec(ctx, "SELECT txid_current(), '"+secret+"'")
	require.NoError(t, err)

	var r result
	var mine *finding
	require.Eventually(t, func() bool {
		var found []finding
		r, found = doctorJSON(t, "--db", withPassword, "--schema", d.schema, "--lease", "1s")
		for _, f := range ofCheck(found, heraldpg.CheckXmin) {
			if strings.Contains(f.Message, fmt.Sprintf("pid %d ", pid)) {
				mine = &f
			}
		}
		return mine != nil
	}, 10*time.Second, 100*time.Millisecond)
	require.NotContains(t, r.stdout+r.stderr, secret)
	require.Contains(t, mine.Message, "idle in transaction")
	require.Contains(t, mine.Message, "query: SELECT txid_current(), '")
	require.Equal(t, fmt.Sprintf("SELECT pg_terminate_backend(%d); or make the application end its transactions", pid), mine.Fix)

	// Without --lease, the relay's default (a minute, HERALD_LEASE) applies.
	r = cli(t, map[string]string{"HERALD_LEASE": "1h"}, "doctor", "--db", dsn, "--schema", d.schema)
	require.NotContains(t, r.stdout, fmt.Sprintf("pid %d ", pid))
}

func TestDoctorChecksDestinations(t *testing.T) {
	t.Parallel()
	d := setup(t)
	const secret = "Nats-Pw-doctor"
	r, found := doctorJSON(t, "--db", testenv.PostgresDSN(t), "--schema", d.schema,
		"--destination", "events=nats://app:"+secret+"@127.0.0.1:1")
	require.Equal(t, 1, r.code, r)
	got := ofCheck(found, checkDestination)
	require.Len(t, got, 1)
	require.Equal(t, heraldpg.SeverityError, got[0].Severity)
	require.Contains(t, got[0].Message, "destination events: cannot reach")
	require.Contains(t, got[0].Fix, "start the broker")
	require.NotContains(t, r.stdout+r.stderr, secret)

	n := testenv.NATS(t)
	r, found = doctorJSON(t, "--db", testenv.PostgresDSN(t), "--schema", d.schema, "--publisher", n.URL())
	got = ofCheck(found, checkDestination)
	require.Len(t, got, 1, r)
	require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
	require.Contains(t, got[0].Message, "destination default (")
}

func TestDoctorOfSQLiteWarnsItChecksPostgreSQLOnly(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "shop.db")
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", db).code)
	r, found := doctorJSON(t, "--db", db)
	require.Equal(t, 0, r.code, r)
	require.Len(t, found, 1)
	require.Equal(t, heraldpg.SeverityWarning, found[0].Severity)
	require.Equal(t, "database", found[0].Check)
	require.Contains(t, found[0].Message, "doctor checks PostgreSQL only for now")
}

func TestDoctorRefusesBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args    []string
		message string
	}{
		{[]string{"--lease", "0s"}, "herald: --lease: 0s is not positive"},
		{[]string{"--source", "wal"}, `herald: --source: "wal" is not poll or cdc`},
		{[]string{"extra"}, `herald doctor takes no arguments, got "extra"`},
	} {
		r := cli(t, nil, append([]string{"doctor", "--db", "postgres://127.0.0.1:1/db"}, tc.args...)...)
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, tc.message)
	}
}
