package heraldmqtt_test

import (
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// The shared publisher suite against the machine's Mosquitto. Event topics
// map dots to slashes under the test's prefix; the test's subscriber has
// every message under it, and Read takes those of one topic name.
func TestConformance(t *testing.T) { conformance(t, nil) }

// The same with CloudEvents on, in each mode: Parse gives back what the
// suite sent, but for the producer's headers in binary mode, which does not
// send them.
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
	mqttTopic := func(topic string) string { return b.prefix + strings.ReplaceAll(topic, ".", "/") }
	busy := startRefusingBroker(t, func(n int64, _ *packets.Publish) byte {
		if n%3 == 0 {
			return heraldmqtt.ReasonQuotaExceeded
		}
		return 0
	})

	publishertest.Run(t, publishertest.Harness{
		// KeyOrder: rounds per key. PermanentTooLarge: the packet size is
		// checked before sending. No Dedup: MQTT has none.
		Features: publishertest.Features{KeyOrder: true, Headers: ce == nil || ce.ModeOr(heraldce.Binary) == heraldce.Structured, PermanentTooLarge: true},
		New: func(t *testing.T) herald.Publisher {
			return b.publisher(t, &heraldmqtt.Config{TopicMapping: heraldmqtt.TopicDotsToSlashes, MaxPacketBytes: tooLarge / 2, CloudEvents: ce})
		},
		Topic: func(t *testing.T) string { return fmt.Sprintf("conformance.%d", topics.Add(1)) },
		Read: func(t *testing.T, topic string, n int) []publishertest.Received {
			var got []publishertest.Received
			for _, pub := range b.sub.wait(t, mqttTopic(topic), n) {
				require.EqualValues(t, 1, pub.QoS, "published at QoS 1")
				m, err := heraldmqtt.Parse(pub)
				require.NoError(t, err)
				got = append(got, publishertest.ReceivedOf(m))
			}
			return got
		},
		Unreachable: func(t *testing.T) herald.Publisher {
			u, err := url.Parse("mqtt://127.0.0.1:1")
			require.NoError(t, err)
			return newPublisher(t, autopaho.ClientConfig{ServerUrls: []*url.URL{u}}, nil)
		},
		TooLarge: tooLarge,
		// A broker that answers every third PUBLISH with Quota exceeded.
		Busy: &publishertest.Busy{
			New: func(t *testing.T) herald.Publisher {
				return newPublisher(t, clientConfig(t, busy.ln.Addr().String()),
					&heraldmqtt.Config{TopicPrefix: b.prefix, TopicMapping: heraldmqtt.TopicDotsToSlashes, CloudEvents: ce})
			},
			Read: func(t *testing.T, topic string, n int) []publishertest.Received {
				return busy.read(t, mqttTopic(topic), n)
			},
		},
	})
}
