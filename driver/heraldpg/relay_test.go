package heraldpg_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The relay's guarantees on every driver are heralddrivertest's relay
// cases; the tests here need PostgreSQL itself: its sessions killed, its
// server restarted.

// The relay gets a pool of its own, tagged so that only its connections are
// killed: what a database restart does to it.
func TestRelaySurvivesLosingEveryDatabaseConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	app := "herald_test_" + uuid.NewString()[:8]
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	d, err := heraldpg.New(pool, b.Config)
	require.NoError(t, err)
	rec := heralddrivertest.NewRecorder()
	r, err := herald.NewRelay(&herald.RelayConfig{Store: d, Publisher: rec, Logger: heralddrivertest.Logger(t),
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(ctx)) })

	first := b.WriteN("t", 100)
	rec.RequireAllDeliveredOnce(t, first)
	var killed int
	require.NoError(t, b.Pool.QueryRow(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed))
	require.Positive(t, killed)
	second := b.WriteN("t", 100)
	rec.RequireAllDeliveredOnce(t, second)
}

// The database really goes away and comes back (fast shutdown, then a new
// postmaster on the same port): the relay keeps running, its pool
// reconnects, and events committed after the restart are delivered.
func TestRelaySurvivesADatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc := testenv.PrivateCluster(t)
	pool, err := pgxpool.New(ctx, pc.DSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := heraldpg.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(nil)
	require.NoError(t, err)
	// write retries: the first statements after the restart may meet
	// connections the old server closed, which the pool then replaces.
	write := func(n int) []string {
		msgs := make([]herald.Message, n)
		ids := make([]string, n)
		for i := range msgs {
			ids[i] = herald.NewID()
			msgs[i] = herald.Message{ID: ids[i], Topic: "t", Payload: []byte("x")}
		}
		require.Eventually(t, func() bool {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return false
			}
			defer tx.Rollback(ctx)
			return w.WriteTx(ctx, tx, msgs...) == nil && tx.Commit(ctx) == nil
		}, 30*time.Second, 20*time.Millisecond)
		return ids
	}
	published := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM herald_outbox WHERE state = 'published'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}

	rec := heralddrivertest.NewRecorder()
	var logs testenv.LogBuffer
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: rec,
		Logger:       slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond, OutageBackoffCap: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })

	before := write(100)
	rec.RequireAllDeliveredOnce(t, before)
	require.Eventually(t, func() bool { return published() == 100 }, 10*time.Second, 5*time.Millisecond)

	pc.Stop(t)
	pc.Start(t)

	after := write(100)
	rec.RequireAllDeliveredOnce(t, append(before, after...))
	require.Eventually(t, func() bool { return published() == 200 }, 30*time.Second, 10*time.Millisecond)

	// An outage is a pair of log lines, however many claims failed during
	// it. (The pool may still hold a dead connection after the restart,
	// which makes a second, short episode: still a pair.)
	out := logs.String()
	down := strings.Count(out, "database unreachable")
	require.GreaterOrEqual(t, down, 1, out)
	require.Equal(t, down, strings.Count(out, "database reachable again"), out)
	require.NotContains(t, out, "claim failed", "per-retry lines are Debug")
}
