package heraldpgprom_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldpg/heraldpgprom"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// The collector reports each partition, the default partition and the
// dead-letter table of a partitioned outbox, their sizes and dead tuples,
// the partitions and those kept; on a plain table, the table.
func TestCollectorReportsTheTablesOfTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	d, err := heraldpg.New(pool, &heraldpg.Config{Schema: schema, Partition: &heraldpg.Partitioning{Ahead: 2}})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))
	// The rows land in the current partition, whose dead tuples are
	// counted before autovacuum (a thousand, for a partition) could take
	// them.
	_, err = pool.Exec(ctx, `DO $$ DECLARE p regclass; BEGIN
		FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = '`+d.Table()+`'::regclass LOOP
			EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', p);
		END LOOP; END $$`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload) SELECT 't', '\x00' FROM generate_series(1, 1000)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM `+d.Table())
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `ANALYZE `+d.Table())
	require.NoError(t, err)

	// The statistics collector counts the deleted rows as dead tuples
	// within a moment; the metrics are read once that is so.
	require.Eventually(t, func() bool {
		st, err := d.TableStats(ctx)
		require.NoError(t, err)
		var dead int64
		for _, r := range st.Relations {
			dead += r.DeadTuples
		}
		return dead >= 1000
	}, 10*time.Second, 50*time.Millisecond, "the deleted rows are dead tuples until vacuum")
	reg := prometheus.NewRegistry()
	reg.MustRegister(heraldpgprom.New(d, time.Second))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
	n, ok := gauge(t, reg, "herald_outbox_partitions", nil)
	require.True(t, ok)
	require.Equal(t, 4.0, n, "the current partition, two ahead, the default")
	n, ok = gauge(t, reg, "herald_outbox_relation_bytes", map[string]string{"kind": "dead", "relation": "herald_outbox_dead"})
	require.True(t, ok)
	require.Positive(t, n)
	n, ok = gauge(t, reg, "herald_outbox_relation_bytes", map[string]string{"kind": "default"})
	require.True(t, ok)
	require.Positive(t, n)
	var dead float64
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "herald_outbox_relation_dead_tuples" {
			for _, m := range mf.GetMetric() {
				dead += m.GetGauge().GetValue()
			}
		}
	}
	require.GreaterOrEqual(t, dead, 1000.0)
	n, ok = gauge(t, reg, "herald_outbox_table_stats_up", nil)
	require.True(t, ok)
	require.Equal(t, 1.0, n)

	plain, err := heraldpg.New(pool, &heraldpg.Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, plain.Migrate(ctx))
	reg = prometheus.NewRegistry()
	reg.MustRegister(heraldpgprom.New(plain, time.Second))
	n, ok = gauge(t, reg, "herald_outbox_relation_bytes", map[string]string{"kind": "table", "relation": "herald_outbox"})
	require.True(t, ok)
	require.Positive(t, n)
	n, _ = gauge(t, reg, "herald_outbox_partitions", nil)
	require.Zero(t, n)
}
