package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldspec"
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
	require.Equal(t, heraldspec.SeverityOK, schemaFindings[0].Severity, schemaFindings[0])
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
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		checks = append(checks, f.Check)
	}
	require.Equal(t, []string{"schema", "xmin_horizon", "autovacuum", "replication_slots", "clock"}, checks)

	// The JSON's keys are the documented ones.
	var raw []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &raw))
	for key := range raw[0] {
		require.Contains(t, []string{"severity", "database", "check", "message", "fix"}, key)
	}
	require.Len(t, raw[0], 5)
	require.Equal(t, "default", raw[0]["database"])

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
	require.Equal(t, heraldspec.SeverityError, got[0].Severity)
	require.Contains(t, got[0].Message, "destination events: cannot reach")
	require.Contains(t, got[0].Fix, "start the broker")
	require.NotContains(t, r.stdout+r.stderr, secret)

	n := testenv.NATS(t)
	r, found = doctorJSON(t, "--db", testenv.PostgresDSN(t), "--schema", d.schema, "--publisher", n.URL())
	got = ofCheck(found, checkDestination)
	require.Len(t, got, 1, r)
	require.Equal(t, heraldspec.SeverityOK, got[0].Severity, got[0])
	require.Contains(t, got[0].Message, "destination default (")
}

func TestDoctorOfSQLiteReadsItsSettings(t *testing.T) {
	t.Parallel()
	db := "sqlite:" + filepath.Join(t.TempDir(), "shop.db")
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", db).code)
	r, found := doctorJSON(t, "--db", db)
	require.Equal(t, 0, r.code, r)
	var checks []string
	for _, f := range found {
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		require.Equal(t, "default", f.Database)
		checks = append(checks, f.Check)
	}
	require.Equal(t, []string{"schema", "journal_mode", "busy_timeout", "synchronous", "free_pages", "wal_file"}, checks)
}

func TestDoctorOfMySQLNamesATransactionHeldPastTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("mysql", testenv.MySQL(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	database := testenv.MySQLDatabase(t, db)
	dsn := testenv.MySQLURL(t, database)
	r, found := doctorJSON(t, "--db", dsn, "--lease", "1h")
	require.Equal(t, 1, r.code, r)
	require.Equal(t, heraldspec.SeverityError, ofCheck(found, "schema")[0].Severity)
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", dsn).code)

	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	var thread int64
	require.NoError(t, conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&thread))
	_, err = conn.ExecContext(ctx, "START TRANSACTION")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "INSERT INTO `"+database+"`.herald_outbox (topic, `key`, payload) VALUES ('orders', 'a', 'x')")
	require.NoError(t, err)
	var mine *finding
	require.Eventually(t, func() bool {
		r, found = doctorJSON(t, "--db", dsn, "--lease", "1s")
		for _, f := range ofCheck(found, "long_transactions") {
			if strings.HasPrefix(f.Message, fmt.Sprintf("thread %d ", thread)) {
				mine = &f
			}
		}
		return mine != nil
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, fmt.Sprintf("KILL %d; or make the application end its transactions", thread), mine.Fix)
	require.Equal(t, "ok", string(ofCheck(found, "schema")[0].Severity))
	require.Len(t, ofCheck(found, "clock"), 1)
}

// Several databases: each is checked, its findings labelled with its
// name; one that cannot be reached is an error finding, and the others
// are still checked.
func TestDoctorChecksEveryDatabase(t *testing.T) {
	t.Parallel()
	lite := "sqlite:" + filepath.Join(t.TempDir(), "shop.db")
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", lite).code)
	// --schema is every database's, and SQLite has none: the PostgreSQL
	// database is checked in its public schema, whatever that holds on the
	// shared test server.
	args := []string{"--db", "orders=" + testenv.PostgresDSN(t), "--databases", "shop,gone"}
	env := map[string]string{"HERALD_DB_SHOP": lite, "HERALD_DB_GONE": "postgres://app:Gone-pw-doctor@127.0.0.1:1/gone?connect_timeout=2"}
	r := cli(t, env, append([]string{"doctor", "--json"}, args...)...)
	require.Equal(t, 1, r.code, r)
	var found []finding
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &found), r)
	byDB := map[string][]string{}
	for _, f := range found {
		byDB[f.Database] = append(byDB[f.Database], f.Check)
	}
	require.Equal(t, "schema", byDB["orders"][0])
	require.Equal(t, "clock", byDB["orders"][len(byDB["orders"])-1])
	require.Equal(t, []string{"schema", "journal_mode", "busy_timeout", "synchronous", "free_pages", "wal_file"}, byDB["shop"])
	require.Equal(t, []string{"database"}, byDB["gone"])
	gone := found[len(found)-1]
	require.Equal(t, heraldspec.SeverityError, gone.Severity)
	require.Contains(t, gone.Message, "cannot reach the database app@127.0.0.1:1/gone: ")
	require.Contains(t, gone.Fix, "start the database")
	require.NotContains(t, r.stdout+r.stderr, "Gone-pw-doctor")

	// The table labels each line with its database.
	r = cli(t, env, append([]string{"doctor"}, args...)...)
	require.Equal(t, 1, r.code, r)
	require.Regexp(t, `^herald doctor: orders \(.+\), shop \(.+shop\.db\), gone \(app@127\.0\.0\.1:1/gone\)\n\nDATABASE +SEVERITY +CHECK +FINDING +FIX\norders +\w+ +schema +`, r.stdout)
	require.Regexp(t, `\nshop +ok +journal_mode +journal_mode is wal`, r.stdout)
	require.Regexp(t, `\ngone +error +database +cannot reach the database app@127\.0\.0\.1:1/gone: `, r.stdout)
}

// A route's target: a JetStream stream for one route, none for another;
// a Redis destination has nothing to check.
func TestDoctorChecksTheTargetsOfRoutes(t *testing.T) {
	t.Parallel()
	d := setup(t)
	n := testenv.NATS(t)
	n.CreateStream(t, "ORDERS", "orders.>")
	r, found := doctorJSON(t, "--db", testenv.PostgresDSN(t), "--schema", d.schema,
		"--destination", "events="+n.URL(), "--destination", "cache=redis://127.0.0.1:6379/0",
		"--route", "orders.*=events", "--route", "refunds.issued=events", "--route", "carts.>=cache", "--default-destination", "events")
	require.Equal(t, 1, r.code, r)
	got := ofCheck(found, checkDestinationTarget)
	require.Len(t, got, 4, "%v", got)
	require.Equal(t, heraldspec.SeverityOK, got[0].Severity, got[0])
	require.Equal(t, "destination events, topic orders.*: JetStream stream ORDERS captures subject orders.*", got[0].Message)
	require.Equal(t, heraldspec.SeverityError, got[1].Severity, got[1])
	require.Equal(t, "destination events, topic refunds.issued: no JetStream stream captures subject refunds.issued: its events are retried until one does", got[1].Message)
	require.Equal(t, "pass --nats-create-stream NAME --nats-stream-subjects refunds.issued, or create a stream whose subjects include it", got[1].Fix)
	require.Equal(t, heraldspec.SeverityOK, got[2].Severity)
	require.Contains(t, got[2].Message, "destination events, the topics no route names: not checked")
	require.Equal(t, "destination cache: nothing to check ahead: Redis makes a stream on its first XADD", got[3].Message)
	for _, f := range found {
		if f.Check == checkDestination || f.Check == checkDestinationTarget {
			require.Empty(t, f.Database, "a destination belongs to no database")
		}
	}

	// The fix it names is the fix: no destination finding is an error
	// any more. (The shared server's own settings may still be: a CI
	// server runs with autovacuum off, which doctor rightly reports; the
	// exit status follows the errors found.)
	n.CreateStream(t, "REFUNDS", "refunds.issued")
	r, found = doctorJSON(t, "--db", testenv.PostgresDSN(t), "--schema", d.schema,
		"--destination", "events="+n.URL(), "--route", "refunds.issued=events")
	got = ofCheck(found, checkDestinationTarget)
	require.Equal(t, heraldspec.SeverityOK, got[0].Severity, got)
	status := 0
	for _, f := range found {
		if f.Severity == heraldspec.SeverityError {
			status = 1
			require.NotContains(t, []string{checkDestination, checkDestinationTarget}, f.Check, "%+v", f)
		}
	}
	require.Equal(t, status, r.code, r)
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
		{[]string{"--cdc-slot", "s"}, "herald: --cdc-slot is only used with --source cdc"},
		{[]string{"--source", "cdc", "--cdc-publication", "a b"}, `herald: --cdc-publication: "a b" must match`},
	} {
		r := cli(t, nil, append([]string{"doctor", "--db", "postgres://127.0.0.1:1/db"}, tc.args...)...)
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, tc.message)
	}
}

// The config file's databases are each checked, by name.
func TestDoctorChecksTheDatabasesOfAConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shop, stock := filepath.Join(dir, "shop.db"), filepath.Join(dir, "stock.db")
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", "sqlite:"+shop).code)
	require.Equal(t, 0, cli(t, nil, "migrate", "--db", "sqlite:"+stock, "--table", "other").code)
	path := writeConfig(t, fmt.Sprintf("databases:\n  shop: sqlite:%s\n  stock: sqlite:%s\n", shop, stock))
	r, found := doctorJSON(t, "--config", path)
	require.Equal(t, 1, r.code, r)
	schemas := ofCheck(found, "schema")
	require.Len(t, schemas, 2)
	require.Equal(t, "shop", schemas[0].Database)
	require.Equal(t, heraldspec.SeverityOK, schemas[0].Severity)
	require.Equal(t, "stock", schemas[1].Database)
	require.Equal(t, heraldspec.SeverityError, schemas[1].Severity, "stock has no herald_outbox table")
	require.Equal(t, "herald migrate --table herald_outbox", schemas[1].Fix)
}
