package heraldpg

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/heraldtest"
)

// A claim must stay one probe of the ready index however many published
// and dead rows the table holds.
func TestClaimIsOneIndexProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := heraldtest.PostgresPool(t)
	d, err := New(pool, &Config{Schema: heraldtest.Schema(t)})
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
	require.NotContains(t, text, "Seq Scan", text)

	// The backlog, read on every metrics refresh, reads the waiting and
	// dead rows through their indexes, never the 100,000 published ones.
	text = explain(d.q.backlog)
	require.Contains(t, text, "herald_outbox_dead_idx", text)
	require.NotContains(t, text, "Seq Scan", text)

	// The rescuer finds expired leases among the claimed rows, in the
	// blocked index.
	text = explain(d.q.rescue, 1000)
	require.Contains(t, text, "herald_outbox_blocked_idx", text)
	require.NotContains(t, text, "Seq Scan", text)

	// So does an ordered claim's walk over the keys.
	text = explain(d.q.walkKeys, "", "", 2000, 1000, 1000, []string{}, int32(1))
	require.Contains(t, text, "herald_outbox_key_idx", text)
	require.NotContains(t, text, "Seq Scan", text)
}
