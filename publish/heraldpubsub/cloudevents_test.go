package heraldpubsub_test

import (
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/cetest"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

// sdk-go's Pub/Sub module is not in the module proxy Herald builds from
// (and would bring the v1 client beside v2): cetest reads each message as
// the Pub/Sub binding says, ce-* attributes and the Content-Type
// attribute, into sdk-go's event.
func ceMessage(m *pubsub.Message) cetest.Message {
	out := cetest.Message{Prefix: heraldce.PrefixPubSub, ContentType: m.Attributes["Content-Type"], Body: m.Data}
	for name, v := range m.Attributes {
		out.Headers = append(out.Headers, cetest.Header{Name: name, Value: v})
	}
	return out
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode)+"MessageIsReadByTheSDKAndParse", func(t *testing.T) {
			t.Parallel()
			f := newFake(t, nil)
			f.topic(t, "prod-orders")
			p := f.publisher(t, &heraldpubsub.Config{TopicPrefix: "prod-", CloudEvents: &heraldce.Config{Source: "urn:shop:orders", Mode: mode}})
			env := cetest.Envelope("orders")
			require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

			stored := f.stored("prod-orders")
			require.Len(t, stored, 1)
			m := &pubsub.Message{Data: stored[0].Data, Attributes: stored[0].Attributes, OrderingKey: stored[0].OrderingKey}
			require.Equal(t, "order-7", m.OrderingKey, "the ordering key stays the event's key")
			require.Equal(t, "acme", m.Attributes["X-Tenant"])
			require.NotContains(t, m.Attributes, herald.HeaderID)
			if mode == heraldce.Binary {
				require.Equal(t, env.ID, m.Attributes["ce-id"])
				require.Equal(t, "application/json", m.Attributes["Content-Type"])
				require.Equal(t, env.Payload, m.Data)
			} else {
				require.Equal(t, heraldce.StructuredContentType, m.Attributes["Content-Type"])
				require.NotContains(t, m.Attributes, "ce-id")
			}

			e, err := cetest.ToEvent(t.Context(), ceMessage(m))
			require.NoError(t, err)
			cetest.Check(t, e, &env, "urn:shop:orders")

			// The prefix is not needed: the topic travels in heraldtopic.
			back, err := heraldpubsub.Parse(m)
			require.NoError(t, err)
			require.Equal(t, env.Message, back)
		})
	}

	t.Run("NewRefusesABadSource", func(t *testing.T) {
		t.Parallel()
		f := newFake(t, nil)
		_, err := heraldpubsub.New(f.client, &heraldpubsub.Config{CloudEvents: &heraldce.Config{Source: "a b"}})
		require.ErrorContains(t, err, "heraldpubsub: Config.CloudEvents.Source")
	})

	t.Run("ParseRefusesACloudEventHeraldDidNotSend", func(t *testing.T) {
		t.Parallel()
		_, err := heraldpubsub.Parse(&pubsub.Message{Attributes: map[string]string{"ce-id": "42", "ce-specversion": "1.0"}})
		require.ErrorIs(t, err, heraldpubsub.ErrNotHerald)
	})
}
