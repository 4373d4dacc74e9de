package heraldpg

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// A claim must stay one probe of the ready index however many published
// and dead rows the table holds.
func TestClaimIsOneIndexProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	d, err := New(pool, &Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))

	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload, state, published_at)
		SELECT 'done', '\x00', 'published', now() FROM generate_series(1, 100000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload, state, dead_at)
		SELECT 'dead', '\x00', 'dead', now() FROM generate_series(1, 10000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload) SELECT 'new', '\x00' FROM generate_series(1, 50)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE `+d.Table())
	require.NoError(t, err)

	explain := func(sql string, args ...any) string {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+sql, args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		return strings.Join(plan, "\n")
	}
	text := explain(d.q.claim, 1000, uuid.NewString(), "test", int64(60e6), int64(64<<20))
	require.Contains(t, text, "herald_outbox_ready_idx", text)
	requireNoTableScan(t, d, text, text)

	// The backlog, read on every metrics refresh, reads the waiting and
	// dead rows through their indexes, never the 100,000 published ones.
	text = explain(d.q.backlog)
	require.Contains(t, text, "herald_outbox_dead_idx", text)
	requireNoTableScan(t, d, text, text)

	// The rescuer finds expired leases among the claimed rows, in the
	// blocked index.
	text = explain(d.q.rescue, 1000)
	require.Contains(t, text, "herald_outbox_blocked_idx", text)
	requireNoTableScan(t, d, text, text)

	// So does an ordered claim's walk over the keys.
	text = explain(d.q.walkKeys, "", "", 2000, 1000, 1000, []string{}, int32(1), []string{}, false)
	require.Contains(t, text, "herald_outbox_key_idx", text)
	requireNoTableScan(t, d, text, text)

	// And the relay's read of the topics with ready events, while a
	// destination is paused.
	text = explain(d.q.readyTopics)
	require.Contains(t, text, "herald_outbox_key_idx", text)
	requireNoTableScan(t, d, text, text)
}

// Every claim form is index probes whatever the planner knows, with custom
// and with generic plans: over a fresh table never analyzed (100,000 ready
// rows of 1,000 keys behind 1,000,000 published ones), then the same
// analyzed, and over a backlog that arrived after the table was analyzed
// holding 50 rows (statistics that call it tiny). A join planned as a hash
// join would read the whole table on every claim; the last case is where
// it did.
func TestEveryClaimFormIsIndexProbesWhateverThePlan(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	newTable := func() *Driver {
		d, err := New(pool, &Config{Schema: testenv.Schema(t)})
		require.NoError(t, err)
		require.NoError(t, d.Migrate(ctx))
		exec(t, pool, `ALTER TABLE `+d.Table()+` SET (autovacuum_enabled = false)`)
		return d
	}
	ready := func(d *Driver, n int) {
		exec(t, pool, fmt.Sprintf(`INSERT INTO %s (topic, key, payload)
			SELECT 'new', 'k' || (g %% 1000), '\x00' FROM generate_series(1, %d) g`, d.Table(), n))
	}

	big := newTable()
	exec(t, pool, `INSERT INTO `+big.Table()+` (topic, key, payload, state, published_at)
		SELECT 'done', 'k' || (g % 1000), '\x00', 'published', now() FROM generate_series(1, 1000000) g`)
	ready(big, 100000)
	requireIndexProbes(t, pool, big, "never analyzed")
	exec(t, pool, `ANALYZE `+big.Table())
	requireIndexProbes(t, pool, big, "analyzed")

	stale := newTable()
	ready(stale, 50)
	exec(t, pool, `ANALYZE `+stale.Table())
	ready(stale, 100000)
	requireIndexProbes(t, pool, stale, "analyzed at 50 rows")
}

// requireIndexProbes explains every claim form of d, in both plan modes,
// and fails on a plan that scans or hashes the table. The forms include
// what ends a leased claim (key leases, the default) and the rescue.
func requireIndexProbes(t *testing.T, pool *pgxpool.Pool, d *Driver, stats string) {
	t.Helper()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, f := range claimForms(d) {
			plan := explainPrepared(t, pool, mode, f.sql, f.args)
			what := fmt.Sprintf("%s, %s, %s:\n%s", f.name, mode, stats, plan)
			requireNoTableScan(t, d, plan, what)
			if strings.Contains(f.name, "acknowledgement") {
				// The rows claimed by token may be read from the
				// in-flight index and hashed: a few, never the table.
				continue
			}
			require.NotContains(t, plan, "Hash Join", what)
			require.NotContains(t, plan, "Merge Join", what)
		}
	}
}

// claimForms are the claim statements of d, with arguments as SQL
// literals: those of both modes, rows and leases, whichever d's is.
func claimForms(d *Driver) []struct{ name, sql, args string } {
	base := newQueries(d.names) // the statements of a driver that claims rows
	return []struct{ name, sql, args string }{
		{"unordered claim", d.q.claim, `1000, gen_random_uuid(), 'plan', 60000000, 67108864`},
		{"ordered claim's walk", d.q.walkKeys, `'', '', 2000, 1000, 1000, '{}'::text[], 1, '{}'::text[], false`},
		// A paused topic is passed, not read: its keys are all of the
		// backlog here.
		{"ordered claim's walk past a paused topic", d.q.walkKeys, `'', '', 2000, 1000, 1000, '{}'::text[], 1, '{new}'::text[], false`},
		{"unordered claim's walk while a topic is paused", d.q.walkKeys, `'', '', 2000, 1000, 1000, '{}'::text[], 1, '{new}'::text[], true`},
		{"the topics with ready events", d.q.readyTopics, ``},
		{"ordered claim's keys", base.claimKeys, `ARRAY['new','new','new'], ARRAY['k1','k2','k3'], ARRAY[false,false,true],
			1000, 1000, gen_random_uuid(), 'plan', 60000000, 67108864`},
		{"ordered claim's keys, leased", d.q.claimKeysLeased, `ARRAY['new','new','new'], ARRAY['k1','k2','k3'], ARRAY[false,false,true],
			1000, 1000, gen_random_uuid(), 'plan', 60000000, 67108864, 2`},
		// What ends a claim in that mode reads leases and the events
		// named, by their ids.
		{"leased acknowledgement", d.q.publishLeased, `ARRAY[gen_random_uuid(), gen_random_uuid()], gen_random_uuid(), true`},
		{"leased deleting acknowledgement", d.q.publishDeleteLeased, `ARRAY[gen_random_uuid(), gen_random_uuid()], gen_random_uuid(), true`},
		{"leased acknowledgement with failures", d.q.completeLeased, leasedCompleteArgs},
		{"leased deleting acknowledgement with failures", d.q.completeDeleteLeased, leasedCompleteArgs},
		{"leased release", d.q.releaseClaimLeased, `gen_random_uuid()`},
		{"rescue", d.q.rescue, `1000`},
	}
}

// requireNoTableScan fails on a plan that reads the outbox table (or a
// partition of it) whole. The leases table (key leases, the default) holds a row
// per key in flight, a few: the planner may read it whole.
func requireNoTableScan(t *testing.T, d *Driver, plan, what string) {
	t.Helper()
	for line := range strings.Lines(plan) {
		_, scanned, ok := strings.Cut(line, "Seq Scan on ")
		if ok && !strings.HasPrefix(scanned, d.names.Table+"_leases ") {
			t.Fatalf("a scan of the outbox table: %s\n%s", strings.TrimSpace(line), what)
		}
	}
}

const leasedCompleteArgs = `ARRAY[gen_random_uuid(), gen_random_uuid()], gen_random_uuid(), ARRAY[true, false],
	ARRAY[false, false], ARRAY[false, false], ARRAY[false, false], ARRAY[0, 1000]::bigint[], ARRAY[NULL, 'no'], true`

func exec(t *testing.T, pool *pgxpool.Pool, sql string) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql)
	require.NoError(t, err, sql)
}

// explainPrepared prepares sql, executes it under EXPLAIN ANALYZE with
// args (SQL literals) in plan_cache_mode mode, after the settings given
// (as the driver's transaction makes them), and rolls back.
func explainPrepared(t *testing.T, pool *pgxpool.Pool, mode, sql, args string, settings ...string) string {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	for _, s := range append(settings, `SET LOCAL plan_cache_mode = `+mode, `PREPARE claim_form AS `+sql) {
		_, err = tx.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	execute := `EXECUTE claim_form`
	if args != "" {
		execute += `(` + args + `)`
	}
	rows, err := tx.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS) `+execute, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	_, err = tx.Exec(ctx, `DEALLOCATE claim_form`)
	require.NoError(t, err)
	return strings.Join(plan, "\n")
}
