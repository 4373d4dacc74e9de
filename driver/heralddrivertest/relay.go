package heralddrivertest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// relayCases check the relay end to end, on the driver's store.
var relayCases = []testCase{
	{"RelayPublishesEverythingOnce", func(t *testing.T, o *Kit) {
		ids := o.WriteN("relay", 500)
		var (
			mu        sync.Mutex
			delivered = make(map[string]int, len(ids))
			retried   []string
		)
		pub := herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range batch {
				delivered[e.ID]++
				if e.Attempt != 1 {
					retried = append(retried, e.ID)
				}
			}
			return nil
		})
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: o.d.Store, Publisher: pub, Owner: o.owner,
			Logger:    slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			BatchSize: 50, MaxInFlight: 4, PollInterval: 2 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
			Lease: 10 * time.Second, PublishTimeout: 5 * time.Second,
		})
		require.NoError(t, err)
		stop := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			return relay.Stop(ctx)
		}
		require.NoError(t, relay.Start(o.ctx()))
		t.Cleanup(func() { _ = stop() }) // when an assertion below fails first

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			st, err := o.d.Admin.Status(o.ctx())
			require.NoError(c, err)
			require.Equal(c, map[string]int64{"relay/published": int64(len(ids))}, countsOf(st))
		}, waitFor, 10*time.Millisecond, "every event published and acknowledged")
		require.NoError(t, stop())
		require.NoError(t, stop(), "Stop is safe to call twice")

		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			require.Equal(t, 1, delivered[id], "event %s delivered %d times", id, delivered[id])
		}
		require.Len(t, delivered, len(ids))
		require.Empty(t, retried, "no event needed a second attempt")
		stats := relay.Stats()
		require.EqualValues(t, len(ids), stats.Claimed)
		require.EqualValues(t, len(ids), stats.Published)
		require.Zero(t, stats.Retried+stats.Dead+stats.Released+stats.Rescued)
	}},
}
