package heraldpg

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The acknowledgements of rows claimed as rows find them by id in the
// primary key, whatever the statistics and the plan mode. Dead letters that
// park their key stay in the index of claimed and parked rows until an
// operator acts, and may pile up by the hundred thousand: an
// acknowledgement must not read that index. And a batch of 1,000 ids given
// as an array the planner could weigh was planned, on a table of 201,000
// rows never analyzed, as a scan of the whole table (24 ms against 9 ms
// for the probes); the ids now come through a subquery (batchIDsSQL).
func TestAcknowledgementsAreIDProbesWhateverThePlan(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	d, err := New(pool, &Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))
	// The statements of a driver that claims rows (Config.ClaimRows), and
	// of one that leases keys (the default), told that the claim holds
	// rows: the rows are the batch here.
	rows, err := New(pool, &Config{Schema: d.names.Schema, ClaimRows: true})
	require.NoError(t, err)
	exec(t, pool, `ALTER TABLE `+d.Table()+` SET (autovacuum_enabled = false)`)
	exec(t, pool, `INSERT INTO `+d.Table()+` (topic, key, payload, state, dead_at, parked)
		SELECT 'dead', 'k' || g, '\x00', 'dead', now(), true FROM generate_series(1, 100000) g`)
	const token = `'00000000-0000-4000-8000-000000000001'::uuid`
	exec(t, pool, `INSERT INTO `+d.Table()+` (topic, key, payload, state, claim_token, lease_until)
		SELECT 'new', 'k' || g, '\x00', 'claimed', `+token+`, now() + interval '1 hour' FROM generate_series(1, 1000) g`)
	exec(t, pool, `INSERT INTO `+d.Table()+` (topic, key, payload, state, published_at)
		SELECT 'done', 'k' || g, '\x00', 'published', now() FROM generate_series(1, 100000) g`)
	var ids string
	require.NoError(t, pool.QueryRow(ctx, `SELECT 'ARRAY[' || string_agg(quote_literal(id::text), ',') || ']::uuid[]'
		FROM `+d.Table()+` WHERE state = 'claimed'`).Scan(&ids))
	outcomes := func(v string) string { return `array_fill(` + v + `, ARRAY[1000])` }
	withFailures := strings.Join([]string{ids, token, outcomes("true"), outcomes("false"), outcomes("false"),
		outcomes("false"), outcomes("0::bigint"), outcomes("NULL::text")}, ", ")
	forms := []struct{ name, sql, args string }{
		{"acknowledgement", rows.q.publish, ids + ", " + token},
		{"deleting acknowledgement", rows.q.publishDelete, ids + ", " + token},
		{"acknowledgement with failures", rows.q.complete, withFailures},
		{"deleting acknowledgement with failures", rows.q.completeDelete, withFailures},
		{"leased acknowledgement", d.q.publish, ids + ", " + token + ", true"},
		{"leased deleting acknowledgement", d.q.publishDelete, ids + ", " + token + ", true"},
		{"leased acknowledgement with failures", d.q.complete, withFailures + ", true"},
		{"leased deleting acknowledgement with failures", d.q.completeDelete, withFailures + ", true"},
	}
	for _, stats := range []string{"never analyzed", "analyzed"} {
		if stats == "analyzed" {
			exec(t, pool, `ANALYZE `+d.Table())
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			for _, f := range forms {
				plan := explainPrepared(t, pool, mode, f.sql, f.args)
				what := fmt.Sprintf("%s, %s, %s:\n%s", f.name, mode, stats, plan)
				requireNoTableScan(t, d, plan, what)
				require.NotContains(t, plan, "_blocked_idx", what)
				require.Contains(t, plan, "rows=1000 loops=1", "%s: the batch's rows were found", what)
			}
		}
	}
}
