package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// --fair-by is heraldpg's Config.FairBy: refused for another database and
// in a form it does not know, before anything connects.
func TestFairByIsCheckedBeforeAnythingConnects(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
	require.Zero(t, r.code, r.stderr)
	r = cli(t, nil, "relay", "--db", "sqlite:"+path, "--publisher", "nats://127.0.0.1:1", "--fair-by", "topic")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "herald: --fair-by: only a PostgreSQL outbox has fair claims; MySQL and SQLite claim keys in order\n", r.stderr)

	pg := "postgres://nobody@127.0.0.1:1/none"
	r = cli(t, nil, "relay", "--db", pg, "--publisher", "nats://127.0.0.1:1", "--fair-by", "tenant")
	require.Equal(t, 2, r.code, r.stderr)
	require.Equal(t, "herald: --fair-by: \"tenant\": want \"topic\", \"header:NAME\" or \"column:NAME\"\n", r.stderr)
	r = cli(t, nil, "migrate", "--db", pg, "--fair-by", "column:Tenant")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "herald: --fair-by: \"column:Tenant\": a column name is lower-case")

	// For a migration tool, the index follows the migrations.
	r = cli(t, nil, "migrate", "--print-sql", "--fair-by", "header:tenant")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?s)COMMIT;\n.*\nCREATE INDEX IF NOT EXISTS "herald_outbox_fair_[0-9a-f]{8}_idx" ON "public"."herald_outbox" `+
		`\(\(coalesce\(headers ->> 'tenant', ''\)\), topic, key, seq\) WHERE state = 'ready';\n$`, r.stdout)
	r = cli(t, nil, "migrate", "--print-sql", "--fair-by", "topic")
	require.Zero(t, r.code, r.stderr)
	require.NotContains(t, r.stdout, "fair", "the key index serves topic")
}

// The steps of docs/how-the-relay-works.md, "Fair claims": herald migrate
// --fair-by creates the index, and a relay with --fair-by delivers every
// event; a relay whose index is missing says what to run.
func TestRelayFairByAHeader(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	d := setup(t)
	r := d.cli(t, "migrate", "--fair-by", "header:tenant")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "migrate: claims fair by header:tenant have their index\n")

	ns := testenv.NATS(t)
	ns.CreateStream(t, "FAIR", "orders.>")
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload, headers)
		SELECT 'orders.placed', 'k' || (g %% 50), '\x00', jsonb_build_object('tenant', CASE WHEN g <= 500 THEN 'big' ELSE 't' || g END)
		FROM generate_series(1, 520) g`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, nil, nil, append([]string{"relay", "--publisher", ns.URL(), "--fair-by", "header:tenant",
			"--batch-size", "50"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 520
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	r = <-done
	require.Equal(t, 0, r.code, r)

	// Another header has no index: the relay stops at once, saying so,
	// and herald doctor reports it with the command that makes it.
	r = d.cli(t, "relay", "--publisher", ns.URL(), "--fair-by", "header:region")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "run `herald migrate --fair-by header:region`")
	for by, want := range map[string]finding{
		"header:tenant": {Severity: "ok", Check: "fair_index"},
		"header:region": {Severity: "error", Check: "fair_index",
			Fix: "herald migrate --schema " + d.schema + " --table herald_outbox --fair-by header:region"},
	} {
		r = d.cli(t, "doctor", "--json", "--fair-by", by)
		var found []finding
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &found), r)
		var got []finding
		for _, f := range found {
			if f.Check == "fair_index" {
				f.Message, f.Database = "", ""
				got = append(got, f)
			}
		}
		require.Equal(t, []finding{want}, got, by)
	}
}
