package heraldmqtt_test

import (
	"testing"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/cetest"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// sdk-go's mqtt_paho module is not in the module proxy Herald builds from:
// cetest reads each PUBLISH as the MQTT binding says, every user property
// an attribute (names unchanged) and the Content Type property, into
// sdk-go's event.
func ceMessage(pub *paho.Publish) cetest.Message {
	m := cetest.Message{ContentType: pub.Properties.ContentType, Body: pub.Payload}
	for _, up := range pub.Properties.User {
		m.Headers = append(m.Headers, cetest.Header{Name: up.Key, Value: up.Value})
	}
	return m
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode)+"PublishIsReadByTheSDKAndParse", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := b.publisher(t, &heraldmqtt.Config{CloudEvents: &heraldce.Config{Source: "urn:shop:orders", Mode: mode}})
			env := cetest.Envelope("orders")
			require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

			pub := b.sub.wait(t, b.prefix+"orders", 1)[0]
			require.EqualValues(t, 1, pub.QoS)
			require.Empty(t, pub.Properties.User.Get(herald.HeaderID))
			want := env.Message
			if mode == heraldce.Binary {
				require.Equal(t, env.ID, pub.Properties.User.Get("id"))
				require.Equal(t, "application/json", pub.Properties.ContentType)
				require.Equal(t, env.Payload, pub.Payload)
				require.Empty(t, pub.Properties.User.Get("X-Tenant"), "every user property is an attribute: no room for other headers")
				delete(want.Headers, "X-Tenant")
			} else {
				require.Equal(t, heraldce.StructuredContentType, pub.Properties.ContentType)
				require.Equal(t, "acme", pub.Properties.User.Get("X-Tenant"))
				require.Empty(t, pub.Properties.User.Get("id"))
			}

			// A reader that takes every user property for an attribute
			// (the binding's rule) accepts the binary message.
			e, err := cetest.ToEvent(t.Context(), ceMessage(pub))
			require.NoError(t, err)
			cetest.Check(t, e, &env, "urn:shop:orders")

			back, err := heraldmqtt.Parse(pub)
			require.NoError(t, err)
			require.Equal(t, want, back)
		})
	}

	t.Run("NewRefusesABadSource", func(t *testing.T) {
		t.Parallel()
		err := heraldmqtt.Config{CloudEvents: &heraldce.Config{Source: "a b"}}.Validate()
		require.ErrorContains(t, err, "heraldmqtt: Config.CloudEvents.Source")
	})

	t.Run("ParseRefusesACloudEventHeraldDidNotSend", func(t *testing.T) {
		t.Parallel()
		pub := &paho.Publish{Properties: &paho.PublishProperties{User: paho.UserProperties{
			{Key: "id", Value: "42"}, {Key: "specversion", Value: "1.0"},
		}}}
		_, err := heraldmqtt.Parse(pub)
		require.ErrorIs(t, err, heraldmqtt.ErrNotHerald)
	})
}
