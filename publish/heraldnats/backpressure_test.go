package heraldnats_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// busyBroker starts a server with the given intake limits and an ORDERS
// stream on orders.>.
func busyBroker(t *testing.T, msgs int, size int64) (*nats.Conn, jetstream.Stream) {
	t.Helper()
	ns := startServer(t, intakeLimits(msgs, size))
	nc, err := nats.Connect(ns.srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 2 * time.Minute,
	})
	require.NoError(t, err)
	return nc, stream
}

// tooManyRequests reports whether err is JetStream's 429.
func tooManyRequests(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 429
}

func TestPublishUnderBackpressure(t *testing.T) {
	t.Parallel()

	t.Run("IntakeRefusalIsUnavailableAndHoldsBackTheRestOfItsKey", func(t *testing.T) {
		t.Parallel()
		// An intake queue of one message: a batch sent without waiting
		// overflows it.
		nc, stream := busyBroker(t, 1, 0)
		p, err := heraldnats.New(nc, nil)
		require.NoError(t, err)

		refused := 0
		for deadline := time.Now().Add(20 * time.Second); refused == 0; {
			require.True(t, time.Now().Before(deadline), "the server never refused a message with a 429")
			var batch []herald.Envelope
			for k := range 100 {
				for i := range 2 {
					batch = append(batch, keyed("orders.placed", fmt.Sprint("k", k), fmt.Appendf(nil, "%d", i)))
				}
			}
			err := p.Publish(t.Context(), batch)
			if err == nil {
				continue
			}
			errs := batchErrors(t, err, len(batch))
			stored := storedIDs(t, stream)
			for i, e := range errs {
				switch {
				case e == nil:
					require.Contains(t, stored, batch[i].ID)
				case tooManyRequests(e):
					refused++
					require.True(t, herald.IsUnavailable(e), "a 429 must not spend an attempt: %v", e)
					require.False(t, herald.IsPermanent(e), "%v", e)
					if i%2 == 0 {
						require.ErrorIs(t, errs[i+1], herald.ErrHeldBack)
						require.NotContains(t, stored, batch[i+1].ID, "an event stored behind a refused one of its key")
					}
				default:
					require.ErrorIs(t, e, herald.ErrHeldBack)
				}
			}
		}
		require.Eventually(t, func() bool { return p.PendingBytes() == 0 }, 10*time.Second, time.Millisecond,
			"every answered message releases its bytes")
	})

	t.Run("BytesAwaitingPubAckStayUnderMaxPendingBytes", func(t *testing.T) {
		t.Parallel()
		// 64 keys of 128 KiB each, 8 MiB in one round, against an intake
		// queue of 1 MiB.
		const intake = 1 << 20
		nc, _ := busyBroker(t, 0, intake)
		batch := func() []herald.Envelope {
			var b []herald.Envelope
			for k := range 64 {
				b = append(b, keyed("orders.placed", fmt.Sprint("k", k), make([]byte, 128<<10)))
			}
			return b
		}

		// The control: sent all at once, the round overflows the queue.
		unbounded, err := heraldnats.New(nc, &heraldnats.Config{MaxPendingBytes: 1 << 30})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			err := unbounded.Publish(t.Context(), batch())
			return err != nil && slices.ContainsFunc(batchErrors(t, err, 64), tooManyRequests)
		}, 20*time.Second, time.Millisecond, "the test's intake queue never overflowed")

		// Half the queue in flight at most: it never overflows.
		p, err := heraldnats.New(nc, &heraldnats.Config{MaxPendingBytes: intake / 2})
		require.NoError(t, err)
		for range 5 {
			require.NoError(t, p.Publish(t.Context(), batch()))
		}
		require.Eventually(t, func() bool { return p.PendingBytes() == 0 }, 10*time.Second, time.Millisecond)
	})

	t.Run("MessageOverMaxPendingBytesIsSentAlone", func(t *testing.T) {
		t.Parallel()
		nc, stream := busyBroker(t, 0, 0)
		p, err := heraldnats.New(nc, &heraldnats.Config{MaxPendingBytes: 1024})
		require.NoError(t, err)
		batch := []herald.Envelope{
			keyed("orders.placed", "a", make([]byte, 4096)),
			keyed("orders.placed", "b", make([]byte, 4096)),
			keyed("orders.placed", "c", []byte("small")),
		}
		require.NoError(t, p.Publish(t.Context(), batch))
		require.Len(t, storedIDs(t, stream), 3)
		require.Eventually(t, func() bool { return p.PendingBytes() == 0 }, 10*time.Second, time.Millisecond)
	})

	t.Run("BytesOfAMessageAbandonedByPublishAreReleasedWhenAnswered", func(t *testing.T) {
		t.Parallel()
		nc, _ := busyBroker(t, 0, 0)
		p, err := heraldnats.New(nc, nil)
		require.NoError(t, err)
		// No stream captures the subject: the client retries for about
		// half a second after Publish gave up, then fails the message.
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		require.Error(t, p.Publish(ctx, []herald.Envelope{envelope("nowhere.placed")}))
		require.Eventually(t, func() bool { return p.PendingBytes() == 0 }, 10*time.Second, time.Millisecond)
	})
}
