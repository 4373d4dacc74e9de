package publishertest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// Busy is a broker that refuses some publishes for load, for the case
// BusyBrokerRefusalIsUnavailableAndNeverReordersAKey: a stream whose intake
// queue holds a message or two, a tight rate limit. It must capture the
// topics Harness.Topic hands out.
type Busy struct {
	// New returns a publisher to the busy broker, at its default settings.
	New func(t *testing.T) herald.Publisher
	// Read is Harness.Read on the busy broker.
	Read func(t *testing.T, topic string, n int) []Received
}

const (
	// busyKeys and busyPerKey shape the batches sent to the busy broker:
	// many keys in each round, several rounds per key.
	busyKeys   = 50
	busyPerKey = 4
	// busyBatches is how many batches the broker must refuse events of:
	// more chances for a later event of a refused one's key to be stored.
	busyBatches = 5
	// busyWait bounds the wait for those refusals.
	busyWait = 30 * time.Second
)

// busyRefusal publishes batches to the busy broker until it refused events
// of busyBatches of them. A key's events are next to each other in the
// batch, where a publisher that sent them together would see the broker
// refuse one and store the next. A refusal for load must cost the relay no attempt: the event is
// reported with herald.Unavailable, or the whole Publish fails with a plain
// error (an outage). And whatever the broker refused, what it stored of
// each key is a prefix of the key's events in batch order: no later event
// of a key is stored when an earlier one was not.
func (s *suite) busyRefusal(t *testing.T) {
	p := s.h.Busy.New(t)
	deadline := time.Now().Add(busyWait)
	for refusedBatches := 0; refusedBatches < busyBatches; {
		require.Truef(t, time.Now().Before(deadline), "the busy broker refused events of %d batches within %s, not %d",
			refusedBatches, busyWait, busyBatches)
		topic := s.h.Topic(t)
		msgs := make([]herald.Message, 0, busyKeys*busyPerKey)
		for k := range busyKeys {
			for i := range busyPerKey {
				msgs = append(msgs, herald.Message{Topic: topic, Key: fmt.Sprint("k", k), Payload: fmt.Appendf(nil, "%d", i)})
			}
		}
		envs := batch(t, msgs...)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := p.Publish(ctx, envs)
		cancel()

		confirmed, refused := busyResults(t, envs, err)
		if refused > 0 {
			refusedBatches++
		}
		// Per-event results say exactly what was stored; a whole failure
		// says nothing, and what got through must still be in order.
		exact := err == nil || errors.As(err, new(*herald.BatchError))
		got := s.h.Busy.Read(t, topic, len(confirmed))
		for k := range busyKeys {
			key := fmt.Sprint("k", k)
			stored := receivedIDsOfKey(got, key)
			if exact {
				require.Equalf(t, wantIDsOfKey(envs, confirmed, key), stored,
					"key %s: the broker stored exactly the events reported confirmed", key)
				continue
			}
			all := envIDsOfKey(envs, key)
			require.Equalf(t, all[:min(len(stored), len(all))], stored,
				"key %s: what the broker stored is not the start of the key's events in batch order", key)
		}
	}
}

// busyResults checks the answer of a Publish to the busy broker and returns
// the ids it confirmed and how many events it reported refused.
func busyResults(t *testing.T, envs []herald.Envelope, err error) (confirmed []string, refused int) {
	t.Helper()
	var be *herald.BatchError
	switch {
	case err == nil:
		return ids(received(envs)), 0
	case !errors.As(err, &be):
		require.Falsef(t, herald.IsPermanent(err), "a busy broker's refusal is not permanent: %v", err)
		return nil, len(envs)
	}
	require.Len(t, be.Errs, len(envs), "one result per envelope")
	failed := map[string]bool{}
	for i, e := range be.Errs {
		key := envs[i].Key
		switch {
		case e == nil:
			require.Falsef(t, failed[key], "event %d of key %s confirmed after an earlier one of its key failed", i, key)
			confirmed = append(confirmed, envs[i].ID)
			continue
		case errors.Is(e, herald.ErrHeldBack):
		case errors.Is(e, context.DeadlineExceeded):
			require.Failf(t, "Publish to the busy broker timed out", "event %d: %v", i, e)
		default:
			refused++
			require.Truef(t, herald.IsUnavailable(e), "a refusal for load is herald.Unavailable, so that it spends no attempt: %v", e)
		}
		failed[key] = true
	}
	return confirmed, refused
}
