package heraldnats_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// atomicStream is a stream on orders.> that allows atomic batches and
// refuses messages over maxMsgSize bytes (0: no limit).
func atomicStream(t *testing.T, maxMsgSize int32) (*nats.Conn, jetstream.Stream) {
	t.Helper()
	srv := testenv.NATS(t)
	stream := srv.CreateStreamConfig(t, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"}, MaxMsgSize: maxMsgSize, AllowAtomicPublish: true,
	})
	return srv.Conn(t), stream
}

// storedBatchIDs returns the Nats-Batch-Id of every message the stream
// holds, in stream order ("" for a message sent outside a batch).
func storedBatchIDs(t *testing.T, stream jetstream.Stream) []string {
	t.Helper()
	info, err := stream.Info(t.Context())
	require.NoError(t, err)
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := stream.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		ids = append(ids, msg.Header.Get("Nats-Batch-Id"))
	}
	return ids
}

// interleaved returns keys events of each key, the keys taking turns, on
// topic.
func interleaved(topic string, keys, perKey int) []herald.Envelope {
	var batch []herald.Envelope
	for i := range perKey {
		for k := range keys {
			batch = append(batch, keyed(topic, fmt.Sprint("k", k), fmt.Appendf(nil, "%d", i)))
		}
	}
	return batch
}

func idsOf(batch []herald.Envelope) []string {
	ids := make([]string, len(batch))
	for i := range batch {
		ids[i] = batch[i].ID
	}
	return ids
}

func TestAtomicBatches(t *testing.T) {
	t.Parallel()

	t.Run("EventsOfOneSubjectAreStoredAsOneAtomicBatchInBatchOrder", func(t *testing.T) {
		t.Parallel()
		nc, stream := atomicStream(t, 0)
		p, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true})
		require.NoError(t, err)
		batch := append(interleaved("orders.placed", 3, 5), envelope("orders.placed"))
		require.NoError(t, p.Publish(t.Context(), batch))

		require.Equal(t, idsOf(batch), storedIDs(t, stream))
		batches := storedBatchIDs(t, stream)
		require.NotEmpty(t, batches[0], "the events were not sent as an atomic batch")
		for _, id := range batches {
			require.Equal(t, batches[0], id, "one atomic batch for the subject")
		}
	})

	t.Run("BatchIsCutAtAtomicBatchSizeAndEachSubjectHasItsOwn", func(t *testing.T) {
		t.Parallel()
		nc, stream := atomicStream(t, 0)
		p, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true, AtomicBatchSize: 4})
		require.NoError(t, err)
		batch := append(interleaved("orders.placed", 2, 5), interleaved("orders.paid", 2, 2)...)
		batch = append(batch, envelope("orders.refunded"))
		require.NoError(t, p.Publish(t.Context(), batch))

		stored := storedIDs(t, stream)
		require.ElementsMatch(t, idsOf(batch), stored)
		requireKeyOrder(t, batch, stored)
		perBatch := map[string]int{}
		for _, id := range storedBatchIDs(t, stream) {
			perBatch[id]++
		}
		require.Equal(t, 1, perBatch[""], "the event alone on its subject is sent as a plain message")
		delete(perBatch, "")
		require.Len(t, perBatch, 4, "placed: 10 events in batches of 4, 4 and 2; paid: 4 events in one")
		for _, n := range perBatch {
			require.LessOrEqual(t, n, 4)
		}
	})

	// refused publishes two keys' events with a refused one, the last of
	// its atomic batch or not, in batches of size events.
	refused := func(t *testing.T, last bool, size int) {
		t.Helper()
		const maxMsgSize = 1024
		nc, stream := atomicStream(t, maxMsgSize)
		p, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true, AtomicBatchSize: size})
		require.NoError(t, err)
		// Keys a and b take turns; a's third event is too large for the
		// stream. Without MaxMessageBytes only the stream can refuse it,
		// and it refuses the whole atomic batch.
		batch := interleaved("orders.placed", 2, 5)
		bad := 4 // a's third event
		if last {
			batch = batch[:5]
		}
		batch[bad].Payload = bytes.Repeat([]byte("x"), 2*maxMsgSize)
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))

		require.True(t, herald.IsPermanent(errs[bad]), "the too large event fails for good: %v", errs[bad])
		var want []string
		for i := range batch {
			switch {
			case i == bad:
			case batch[i].Key == "k0" && i > bad:
				require.ErrorIs(t, errs[i], herald.ErrHeldBack, "event %d", i)
			default:
				require.NoError(t, errs[i], "event %d", i)
				want = append(want, batch[i].ID)
			}
		}
		require.Equal(t, want, storedIDs(t, stream), "every other event, nothing of k0 after the refused one")
	}
	t.Run("OneRefusedEventFailsAloneAndHoldsBackTheRestOfItsKey", func(t *testing.T) {
		t.Parallel()
		refused(t, false, 0)
	})
	t.Run("KeyWithARefusedEventIsHeldBackInLaterAtomicBatches", func(t *testing.T) {
		t.Parallel()
		// Batches of 4: the refused event opens the second, the key's
		// last event is in the third.
		refused(t, false, 4)
	})
	t.Run("RefusedEventThatIsTheCommitFailsAlone", func(t *testing.T) {
		t.Parallel()
		refused(t, true, 0)
	})

	t.Run("ByteBoundCutsABatchWithoutReorderingAKey", func(t *testing.T) {
		t.Parallel()
		nc, stream := atomicStream(t, 0)
		// A batch holds up to 2000 bytes: the key's large second event does
		// not fit beside its first, its small third would.
		p, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true, MaxPendingBytes: 2000})
		require.NoError(t, err)
		batch := []herald.Envelope{
			keyed("orders.placed", "a", []byte("1")),
			keyed("orders.placed", "a", bytes.Repeat([]byte("2"), 1900)),
			keyed("orders.placed", "a", []byte("3")),
			keyed("orders.placed", "a", []byte("4")),
		}
		require.NoError(t, p.Publish(t.Context(), batch))
		require.Equal(t, idsOf(batch), storedIDs(t, stream))
	})

	t.Run("RepublishedEventsAreStoredOnce", func(t *testing.T) {
		t.Parallel()
		nc, stream := atomicStream(t, 0)
		p, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true})
		require.NoError(t, err)
		batch := interleaved("orders.placed", 2, 4)
		// Part of the batch first, as a relay that lost the answer would
		// have sent it, then all of it, twice.
		require.NoError(t, p.Publish(t.Context(), batch[:3]))
		require.NoError(t, p.Publish(t.Context(), batch))
		require.NoError(t, p.Publish(t.Context(), batch))
		require.Equal(t, idsOf(batch), storedIDs(t, stream))
	})

	t.Run("StreamWithoutAllowAtomicGetsRoundsAndOneWarning", func(t *testing.T) {
		t.Parallel()
		srv := testenv.NATS(t)
		stream := srv.CreateStream(t, "ORDERS", "orders.>")
		var logs testenv.LogBuffer
		p, err := heraldnats.New(srv.Conn(t), &heraldnats.Config{
			AtomicBatches: true, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		require.NoError(t, err)
		first, second := interleaved("orders.placed", 2, 3), interleaved("orders.placed", 2, 3)
		require.NoError(t, p.Publish(t.Context(), first))
		require.NoError(t, p.Publish(t.Context(), second))

		require.Equal(t, append(idsOf(first), idsOf(second)...), storedIDs(t, stream))
		for _, id := range storedBatchIDs(t, stream) {
			require.Empty(t, id)
		}
		require.Equal(t, 1, strings.Count(logs.String(), "does not allow atomic batches"), logs.String())
	})

	t.Run("BusyAnswerToTheCommitIsUnavailableAndHoldsBackTheRestOfEachKey", func(t *testing.T) {
		t.Parallel()
		srv := testenv.NATS(t)
		nc := srv.Conn(t)
		// No stream: a subscriber answers the commit as a server with too
		// many atomic batches in flight does.
		_, err := nc.Subscribe("busy.>", func(m *nats.Msg) {
			if m.Reply != "" {
				_ = m.Respond([]byte(`{"error":{"code":429,"err_code":10210,"description":"atomic publish too many inflight"}}`))
			}
		})
		require.NoError(t, err)
		require.NoError(t, nc.Flush())
		p, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true})
		require.NoError(t, err)
		batch := interleaved("busy.placed", 2, 3)
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		for i, err := range errs {
			if i < 2 {
				require.True(t, herald.IsUnavailable(err), "event %d: %v", i, err)
				continue
			}
			require.ErrorIs(t, err, herald.ErrHeldBack, "event %d", i)
		}
	})

	t.Run("NewRefusesANegativeAtomicBatchSize", func(t *testing.T) {
		t.Parallel()
		nc, _ := atomicStream(t, 0)
		_, err := heraldnats.New(nc, &heraldnats.Config{AtomicBatches: true, AtomicBatchSize: -1})
		require.ErrorContains(t, err, "AtomicBatchSize must not be negative")
	})
}

// requireKeyOrder checks that stored holds each key's events in batch
// order.
func requireKeyOrder(t *testing.T, batch []herald.Envelope, stored []string) {
	t.Helper()
	pos := map[string]int{}
	for i, id := range stored {
		pos[id] = i
	}
	last := map[string]int{}
	for _, env := range batch {
		k := env.Topic + "/" + env.Key
		if p, ok := last[k]; ok {
			require.Greater(t, pos[env.ID], p, "key %s out of order", k)
		}
		last[k] = pos[env.ID]
	}
}
