package heraldpubsub_test

import (
	"strings"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// message Publish builds for it; what Pub/Sub would refuse is refused
// permanently, with the reason.
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Add(make([]byte, 16), "goog-orders", "k", "", "", "", []byte("x"), "goog-h", "v", "", "", "")
	f.Add(make([]byte, 16), "orders", "k", "", "", "", []byte("x"), "X-Long", strings.Repeat("v", 1025), "", "", "")
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, _ string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		env.Ordered = env.Key != ""
		msg, topicID, err := heraldpubsub.Message(&env)
		if err != nil {
			require.True(t, herald.IsPermanent(err), "%v", err)
			require.True(t, pubsubRefuses(&env), "refused an event Pub/Sub takes: %v", err)
			return
		}
		require.False(t, pubsubRefuses(&env), "sent an event Pub/Sub refuses")
		require.Equal(t, env.Topic, topicID)
		require.Equal(t, env.Key, msg.OrderingKey)
		got, err := heraldpubsub.Parse(&pubsub.Message{Data: msg.Data, Attributes: msg.Attributes, OrderingKey: msg.OrderingKey})
		require.NoError(t, err)
		want := env.Message
		if want.Payload == nil {
			want.Payload = []byte{}
		}
		if len(want.Headers) == 0 {
			want.Headers = nil
		}
		require.Equal(t, want, got)
	})
}

// pubsubRefuses reports whether Pub/Sub's documented limits refuse env,
// checked independently of the publisher's code.
func pubsubRefuses(env *herald.Envelope) bool {
	t := env.Topic
	if len(t) < 3 || len(t) > 255 || strings.HasPrefix(t, "goog") ||
		!strings.ContainsRune(topicChars[:52], rune(t[0])) ||
		strings.IndexFunc(t, func(r rune) bool { return !strings.ContainsRune(topicChars, r) }) >= 0 {
		return true
	}
	for name, v := range env.Headers {
		if strings.HasPrefix(name, "goog") || len(v) > 1024 {
			return true
		}
	}
	return false
}

const topicChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~+%"

// Whatever a message's attributes hold, Parse takes it only with a UUID in
// Herald-Id, and hands back as the producer's only attributes that are
// neither Herald's nor Pub/Sub's.
func FuzzParseAnyMessage(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add(id, "Herald-Topic", "orders", "X-Tenant", "acme", []byte("{}"))
	f.Add(id, "googclient_traceparent", "t", "herald-key", "lower", []byte{})
	f.Add("not-a-uuid", "", "", "", "", []byte("x"))
	f.Fuzz(func(t *testing.T, eventID, name1, value1, name2, value2 string, data []byte) {
		attrs := map[string]string{herald.HeaderID: eventID, name1: value1, name2: value2}
		got, err := heraldpubsub.Parse(&pubsub.Message{Data: data, Attributes: attrs})
		if err != nil {
			return
		}
		_, err = uuid.Parse(got.ID)
		require.NoError(t, err, "took %q as an event id", got.ID)
		require.NotNil(t, got.Payload)
		for name, v := range got.Headers {
			require.False(t, strings.HasPrefix(strings.ToLower(name), "herald-") || strings.HasPrefix(name, "goog"),
				"attribute %q handed back", name)
			require.Equal(t, attrs[name], v)
		}
	})
}
