package heraldnats_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// conformanceMaxMsgSize is the stream's message size limit: small, so that
// the suite's too-large payload stays cheap to build.
const conformanceMaxMsgSize = 64 << 10

func TestConformance(t *testing.T) {
	t.Parallel()
	conformance(t, nil)
}

// With atomic batches, the stream's MaxMsgSize is left for the server to
// enforce: the too-large event then fails the atomic batch that holds it,
// and the suite shows that only that event fails.
func TestConformanceWithAtomicBatches(t *testing.T) {
	t.Parallel()
	conformance(t, &heraldnats.Config{AtomicBatches: true})
}

// conformance runs the publisher suite with publishers configured as cfg
// (nil: the defaults, with MaxMessageBytes set to the stream's limit).
func conformance(t *testing.T, cfg *heraldnats.Config) {
	atomicBatches := cfg != nil && cfg.AtomicBatches
	srv := testenv.NATS(t)
	nc := srv.Conn(t)
	stream := srv.CreateStreamConfig(t, jetstream.StreamConfig{
		Name:               "CONFORMANCE",
		Subjects:           []string{"conformance.>"},
		MaxMsgSize:         conformanceMaxMsgSize,
		AllowAtomicPublish: atomicBatches,
	})
	if cfg == nil {
		cfg = &heraldnats.Config{MaxMessageBytes: conformanceMaxMsgSize}
	}
	var topics atomic.Int64

	// A server whose streams' intake queue holds one message: a round of
	// many keys overflows it, and it answers 429.
	busy := startServer(t, intakeLimits(1, 0))
	busyConn, err := nats.Connect(busy.srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(busyConn.Close)
	busyJS, err := jetstream.New(busyConn)
	require.NoError(t, err)
	busyStream, err := busyJS.CreateStream(t.Context(), jetstream.StreamConfig{
		Name: "CONFORMANCE", Subjects: []string{"conformance.>"}, Duplicates: 2 * time.Minute,
		AllowAtomicPublish: atomicBatches,
	})
	require.NoError(t, err)

	publishertest.Run(t, publishertest.Harness{
		Features: publishertest.Features{KeyOrder: true, Headers: true, Dedup: true, PermanentTooLarge: true},
		New: func(t *testing.T) herald.Publisher {
			// Without atomic batches, the stream's limit is checked before
			// sending: a message too large is refused without a round trip.
			p, err := heraldnats.New(nc, cfg)
			require.NoError(t, err)
			return p
		},
		Topic: func(t *testing.T) string {
			return fmt.Sprintf("conformance.t%d", topics.Add(1))
		},
		Read: func(t *testing.T, topic string, n int) []publishertest.Received {
			return readSubject(t, stream, topic, n)
		},
		Unreachable: func(t *testing.T) herald.Publisher {
			// Nothing listens on port 1: the connection keeps trying in the
			// background and never connects.
			down, err := nats.Connect("nats://127.0.0.1:1", nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
			require.NoError(t, err)
			t.Cleanup(down.Close)
			p, err := heraldnats.New(down, nil)
			require.NoError(t, err)
			return p
		},
		TooLarge: conformanceMaxMsgSize + 1,
		Busy: &publishertest.Busy{
			New: func(t *testing.T) herald.Publisher {
				p, err := heraldnats.New(busyConn, &heraldnats.Config{AtomicBatches: atomicBatches})
				require.NoError(t, err)
				return p
			},
			Read: func(t *testing.T, topic string, n int) []publishertest.Received {
				return readSubject(t, busyStream, topic, n)
			},
		},
	})
}

// readSubject reads every message stored on subject, waiting up to 10s for
// at least n of them. Once n arrived, it reads the rest of what the stream
// holds on subject, so that duplicates and unexpected events show.
func readSubject(t *testing.T, stream jetstream.Stream, subject string, n int) []publishertest.Received {
	t.Helper()
	cons, err := stream.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	var got []publishertest.Received
	next := func() bool {
		wait := time.Until(deadline)
		if wait <= 0 {
			return false
		}
		m, err := cons.Next(jetstream.FetchMaxWait(wait))
		if err != nil {
			return false
		}
		msg, err := heraldnats.ParseJetStream(m)
		require.NoError(t, err)
		got = append(got, publishertest.ReceivedOf(msg))
		return true
	}
	for len(got) < n && next() {
	}
	require.GreaterOrEqualf(t, len(got), n, "only %d of %d messages arrived on %s", len(got), n, subject)

	info, err := stream.Info(t.Context(), jetstream.WithSubjectFilter(subject))
	require.NoError(t, err)
	stored := int(info.State.Subjects[subject])
	for len(got) < stored && next() {
	}
	require.Lenf(t, got, stored, "could not read every message stored on %s", subject)
	return got
}
