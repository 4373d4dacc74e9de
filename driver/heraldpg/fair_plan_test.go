package heraldpg

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// A fair claim's statements are index probes of the fairness index (for
// "topic", the key index), whatever the planner knows: on a backlog of
// 100,000 ready rows of 1,000 keys and 10 tenants behind 200,000 published
// ones, never analyzed and analyzed, in both plan modes, with a paused
// topic too.
func TestFairClaimsAreIndexProbes(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	for _, by := range []string{"topic", "header:tenant", "column:tenant_id"} {
		d, err := New(pool, &Config{Schema: testenv.Schema(t)})
		require.NoError(t, err)
		require.NoError(t, d.Migrate(ctx))
		exec(t, pool, `ALTER TABLE `+d.Table()+` SET (autovacuum_enabled = false)`)
		exec(t, pool, `ALTER TABLE `+d.Table()+` ADD COLUMN tenant_id bigint`)
		d, err = New(pool, &Config{Schema: d.names.Schema, FairBy: by})
		require.NoError(t, err)
		require.NoError(t, d.Migrate(ctx))
		exec(t, pool, `INSERT INTO `+d.Table()+` (topic, key, payload, state, published_at)
			SELECT 'done', 'k' || (g % 1000), '\x00', 'published', now() FROM generate_series(1, 200000) g`)
		exec(t, pool, `INSERT INTO `+d.Table()+` (topic, key, payload, headers, tenant_id)
			SELECT 't' || (g % 10), 'k' || (g % 1000), '\x00', jsonb_build_object('tenant', 'n' || (g % 10)), g % 10
			FROM generate_series(1, 100000) g`)
		index := d.names.Table + "_key_idx"
		if d.fair.index != "" {
			index = d.fair.index
		}
		forms := []struct{ name, sql, args string }{
			{"values from the first", d.q.fairValues, `'', true, 2000`},
			{"values after one", d.q.fairValues, `'n3', false, 2000`},
			{"walk", d.q.fairWalk, `ARRAY['', 't5'], ARRAY['', 'k1'], 200, 100, 1000, '{}'::text[], 1, '{}'::text[], false,
				ARRAY['n1', 'n5']`},
			{"walk past a paused topic", d.q.fairWalk, `ARRAY['', 't5'], ARRAY['', 'k1'], 200, 100, 1000, '{}'::text[], 1,
				'{t1,t5}'::text[], false, ARRAY['n1', 'n5']`},
		}
		if by != "header:tenant" {
			// The other keys' values are the topics, or the numbers.
			r := strings.NewReplacer("'n", "'"+map[string]string{"topic": "t", "column:tenant_id": ""}[by])
			for i := range forms {
				forms[i].args = r.Replace(forms[i].args)
			}
		}
		for _, stats := range []string{"never analyzed", "analyzed"} {
			if stats == "analyzed" {
				exec(t, pool, `ANALYZE `+d.Table())
			}
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				for _, f := range forms {
					plan := explainPrepared(t, pool, mode, f.sql, f.args)
					what := fmt.Sprintf("%s: %s, %s, %s:\n%s", by, f.name, mode, stats, plan)
					require.Contains(t, plan, index, what)
					requireNoTableScan(t, d, plan, what)
					require.NotContains(t, plan, "Hash Join", what)
					require.NotContains(t, plan, "Merge Join", what)
				}
			}
		}
	}
}
