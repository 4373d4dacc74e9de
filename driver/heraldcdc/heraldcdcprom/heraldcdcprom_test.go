package heraldcdcprom_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heraldcdc/heraldcdcprom"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// gauge reads one series of the registry, and whether it exists.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// The slot's metrics follow it: missing before it exists; retained WAL
// and lag grow while nothing is confirmed and drop after Confirm; lag in
// seconds ages the oldest unconfirmed transaction.
func TestCollectorFollowsTheSlot(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	pc := testenv.PrivateCluster(t)
	pool, err := pgxpool.New(ctx, pc.DSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := heraldpg.New(pool, &heraldpg.Config{})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))

	reg := prometheus.NewPedanticRegistry()
	bare, err := heraldcdcprom.New(heraldcdcprom.Config{Querier: pool, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, reg.Register(bare))
	v, _ := gauge(t, reg, "herald_cdc_slot_wal_status", map[string]string{"status": "missing"})
	require.Equal(t, 1.0, v)
	_, ok := gauge(t, reg, "herald_cdc_slot_retained_wal_bytes", nil)
	require.False(t, ok)
	reg.Unregister(bare)

	s, err := heraldcdc.Open(ctx, heraldcdc.Config{ConnString: pc.DSN, CreateSlot: true, HeartbeatInterval: -1, StatusInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	now := time.Now()
	c, err := heraldcdcprom.New(heraldcdcprom.Config{Querier: pool, Stream: s, Skipped: s, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
	require.NoError(t, err)
	require.NoError(t, reg.Register(c))

	_, err = pool.Exec(ctx, `INSERT INTO herald_outbox (topic, payload) VALUES ('orders', 'x')`)
	require.NoError(t, err)
	nctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tx, err := s.Next(nctx)
	require.NoError(t, err)
	now = tx.CommitTime.Add(90 * time.Second)
	v, _ = gauge(t, reg, "herald_cdc_slot_lag_seconds", nil)
	require.InDelta(t, 90, v, 0.001)
	v, _ = gauge(t, reg, "herald_cdc_slot_wal_status", map[string]string{"status": "reserved"})
	require.Equal(t, 1.0, v)
	v, _ = gauge(t, reg, "herald_cdc_slot_active", nil)
	require.Equal(t, 1.0, v)

	retained0, _ := gauge(t, reg, "herald_cdc_slot_retained_wal_bytes", nil)
	lag0, _ := gauge(t, reg, "herald_cdc_slot_lag_bytes", nil)
	// Another table's transactions: WAL the slot keeps.
	_, err = pool.Exec(ctx, `CREATE TABLE busy (n int, pad text)`)
	require.NoError(t, err)
	for range 40 {
		_, err = pool.Exec(ctx, `INSERT INTO busy SELECT g, repeat('x', 100) FROM generate_series(1, 50) g`)
		require.NoError(t, err)
	}
	retained1, _ := gauge(t, reg, "herald_cdc_slot_retained_wal_bytes", nil)
	lag1, _ := gauge(t, reg, "herald_cdc_slot_lag_bytes", nil)
	require.Greater(t, retained1, retained0+100_000)
	require.Greater(t, lag1, lag0+100_000)

	s.Confirm(tx.End)
	v, _ = gauge(t, reg, "herald_cdc_slot_lag_seconds", nil)
	require.Zero(t, v, "nothing unconfirmed")
	v, _ = gauge(t, reg, "herald_cdc_skipped_messages_total", nil)
	require.Zero(t, v)
	// A message of the event prefix that is no event (not transactional),
	// then an insert: once the insert is read, the message was skipped.
	_, err = pool.Exec(ctx, `SELECT pg_logical_emit_message(false, 'herald.event:public.herald_outbox', 'x')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO herald_outbox (topic, payload) VALUES ('orders', 'y')`)
	require.NoError(t, err)
	tx, err = s.Next(nctx)
	require.NoError(t, err)
	s.Confirm(tx.End)
	v, _ = gauge(t, reg, "herald_cdc_skipped_messages_total", nil)
	require.Equal(t, 1.0, v, "the skipped message is counted")
	// The slot's restart_lsn moves to a point PostgreSQL logs at
	// checkpoints once a confirmation passes it: checkpoint, and confirm
	// one more transaction, until it has.
	require.Eventually(t, func() bool {
		_, err := pool.Exec(ctx, `CHECKPOINT`)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO herald_outbox (topic, payload) VALUES ('orders', 'z')`)
		require.NoError(t, err)
		tx, err := s.Next(nctx)
		require.NoError(t, err)
		s.Confirm(tx.End)
		retained, _ := gauge(t, reg, "herald_cdc_slot_retained_wal_bytes", nil)
		lag, _ := gauge(t, reg, "herald_cdc_slot_lag_bytes", nil)
		return retained < retained1/2 && lag < lag1/2
	}, 20*time.Second, 50*time.Millisecond)
}
