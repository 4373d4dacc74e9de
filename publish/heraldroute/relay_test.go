package heraldroute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/testenv"
)

// With a relay: while one destination is down, the other's events all go
// out, the relay never pauses, and the down destination's events keep their
// attempts (MaxAttempts 2 would otherwise make them dead) until it is back.
func TestRelayKeepsPublishingToTheOthersWhileOneDestinationIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	var msgs []herald.Message
	for i := range 300 {
		topic := "up"
		if i%3 == 0 {
			topic = "down"
		}
		msgs = append(msgs, herald.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%7), Payload: []byte("{}")})
	}
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, w.WriteTx(ctx, tx, msgs...))
	require.NoError(t, tx.Commit())

	up := &sink{}
	var downIsUp atomicBool
	down := &sink{Fail: func(context.Context, []herald.Envelope) error {
		if downIsUp.Load() {
			return nil
		}
		return errors.New("dial tcp 127.0.0.1:1: connection refused")
	}}
	var log testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	router, err := New(&Config{
		Destinations: []Destination{{Name: "up", Publisher: up},
			{Name: "down", Publisher: down, FailureThreshold: 2, OpenFor: 50 * time.Millisecond}},
		Routes: []Route{{Topic: "up", Destination: "up"}, {Topic: "down", Destination: "down"}},
		Logger: logger,
	})
	require.NoError(t, err)
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Publisher: router, Logger: logger, BatchSize: 20,
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond, OutageBackoffCap: 20 * time.Millisecond,
		Retry: herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, MaxAttempts: 2, MaxAge: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { _ = relay.Stop(context.Background()) })

	require.Eventually(t, func() bool { return len(up.ids()) == 200 }, 20*time.Second, 5*time.Millisecond,
		"the healthy destination's events all went out")
	require.Empty(t, down.ids())
	require.NotContains(t, log.String(), "pausing claims", "one destination down is no outage of the relay")
	require.Contains(t, log.String(), "destination down: circuit open")
	st, err := store.Status(ctx)
	require.NoError(t, err)
	for _, ts := range st.Topics {
		require.NotEqual(t, heraldadmin.StateDead, ts.State, "nothing died of the outage: %+v", st.Topics)
	}

	downIsUp.Store(true)
	require.Eventually(t, func() bool { return len(down.ids()) == 100 }, 20*time.Second, 5*time.Millisecond,
		"the destination's events went out once it was back")
	require.Contains(t, log.String(), "destination up again: circuit closed")
}
