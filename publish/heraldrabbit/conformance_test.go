package heraldrabbit_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// The shared publisher suite against the machine's RabbitMQ. Each topic is
// a routing key of the test's exchange with a queue of its own bound to it,
// which Read drains.
func TestConformance(t *testing.T) { conformance(t, nil) }

// The same with CloudEvents on, in each mode: Parse gives back what the
// suite sent.
func TestConformanceCloudEvents(t *testing.T) {
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode), func(t *testing.T) {
			conformance(t, &heraldce.Config{Source: "/conformance", Mode: mode})
		})
	}
}

func conformance(t *testing.T, ce *heraldce.Config) {
	const tooLarge = 128 << 10
	b := setup(t)
	var topics atomic.Int64
	queues := map[string]string{} // topic -> queue
	var mu sync.Mutex             // guards queues: the suite's cases run in parallel

	publishertest.Run(t, publishertest.Harness{
		// KeyOrder: rounds per key. PermanentTooLarge: MaxMessageBytes is
		// checked before sending. No Dedup: RabbitMQ has none.
		Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
		New: func(t *testing.T) herald.Publisher {
			return b.publisher(t, &heraldrabbit.Config{MaxMessageBytes: tooLarge / 2, CloudEvents: ce})
		},
		Topic: func(t *testing.T) string {
			topic := fmt.Sprintf("conformance.%d", topics.Add(1))
			q := b.queue(t, topic, nil)
			mu.Lock()
			queues[topic] = q
			mu.Unlock()
			return topic
		},
		Read: func(t *testing.T, topic string, n int) []publishertest.Received {
			mu.Lock()
			q, ok := queues[topic]
			mu.Unlock()
			require.True(t, ok, "unknown topic %s", topic)
			var got []publishertest.Received
			for _, d := range b.read(t, q, n) {
				m, err := heraldrabbit.Parse(d)
				require.NoError(t, err)
				got = append(got, publishertest.ReceivedOf(m))
			}
			return got
		},
		Unreachable: func(t *testing.T) herald.Publisher {
			p, err := heraldrabbit.New(dialer(t, "amqp://guest:guest@127.0.0.1:1/", amqp.Config{}), nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			return p
		},
		TooLarge: tooLarge,
	})
}
