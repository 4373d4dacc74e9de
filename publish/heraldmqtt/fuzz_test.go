package heraldmqtt_test

import (
	"testing"

	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// PUBLISH that Publish builds for it, or the builder refuses the event
// permanently, for a reason MQTT gives (a string brokers refuse, a topic
// name that cannot be one).
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, prefix string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		pub, err := heraldmqtt.Message(prefix, &env)
		if err != nil {
			if !herald.IsPermanent(err) {
				// The prefix itself was refused, as New would.
				require.ErrorContains(t, err, "Config.TopicPrefix")
				return
			}
			require.Regexp(t, "control character|non-character|wildcard|reserves|empty level", err.Error())
			return
		}
		require.Equal(t, byte(1), pub.QoS)
		require.Equal(t, prefix+env.Topic, pub.Topic)
		// What goes on the wire is what a subscriber decodes.
		got, err := heraldmqtt.Parse(paho.PublishFromPacketPublish(pub.Packet()))
		require.NoError(t, err)
		want := env.Message
		if want.Payload == nil {
			want.Payload = []byte{}
		}
		require.Equal(t, want, got)
	})
}

// Whatever user properties a message holds, Parse takes it only with a
// UUID in Herald-Id, and hands back as headers only names a producer may
// set.
func FuzzParseAnyMessage(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add(id, "Herald-Topic", "orders", "X-Tenant", "acme", []byte("{}"))
	f.Add(id, "Herald-Other", "x", "herald-key", "lower", []byte{})
	f.Add(id, "with space", "v", "CC", "other", []byte(nil))
	f.Add("not-a-uuid", "", "", "", "", []byte("x"))
	f.Fuzz(func(t *testing.T, eventID, name1, value1, name2, value2 string, payload []byte) {
		got, err := heraldmqtt.Parse(&paho.Publish{Topic: "t", Payload: payload, Properties: &paho.PublishProperties{
			User: paho.UserProperties{{Key: name1, Value: value1}, {Key: herald.HeaderID, Value: eventID}, {Key: name2, Value: value2}},
		}})
		if err != nil {
			require.ErrorIs(t, err, heraldmqtt.ErrNotHerald)
			return
		}
		_, err = uuid.Parse(got.ID)
		require.NoError(t, err, "took %q as an event id", got.ID)
		require.NotNil(t, got.Payload)
		for name := range got.Headers {
			require.NoError(t, herald.ValidateHeaderName(name), "header %q handed back", name)
		}
	})
}
