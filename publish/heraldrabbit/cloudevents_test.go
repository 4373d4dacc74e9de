package heraldrabbit_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/cetest"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// sdk-go has no module for AMQP 0-9-1 (its AMQP module speaks AMQP 1.0,
// and is not in the module proxy Herald builds from): cetest reads each
// delivery as the AMQP binding says, cloudEvents:* headers as the
// application properties and the content-type property, into sdk-go's
// event.
func ceMessage(d amqp.Delivery) cetest.Message {
	m := cetest.Message{Prefix: heraldce.PrefixAMQP, ContentType: d.ContentType, Body: d.Body}
	for name, v := range d.Headers {
		s, ok := v.(string)
		if ok {
			m.Headers = append(m.Headers, cetest.Header{Name: name, Value: s})
		}
	}
	return m
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode)+"DeliveryIsReadByTheSDKAndParse", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			q := b.queue(t, "orders", nil)
			p := b.publisher(t, &heraldrabbit.Config{CloudEvents: &heraldce.Config{Source: "urn:shop:orders", Mode: mode}})
			env := cetest.Envelope("orders")
			require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

			d := b.read(t, q, 1)[0]
			require.Equal(t, "acme", d.Headers["X-Tenant"])
			require.NotContains(t, d.Headers, herald.HeaderID)
			require.Equal(t, env.ID, d.MessageId, "the message-id property stays the event id")
			if mode == heraldce.Binary {
				require.Equal(t, env.ID, d.Headers["cloudEvents:id"])
				require.Equal(t, "application/json", d.ContentType)
				require.Equal(t, env.Payload, d.Body)
			} else {
				require.Equal(t, heraldce.StructuredContentType, d.ContentType)
				require.NotContains(t, d.Headers, "cloudEvents:id")
			}

			e, err := cetest.ToEvent(t.Context(), ceMessage(d))
			require.NoError(t, err)
			cetest.Check(t, e, &env, "urn:shop:orders")

			back, err := heraldrabbit.Parse(d)
			require.NoError(t, err)
			require.Equal(t, env.Message, back)
		})
	}

	t.Run("ContentTypeFillsInForAnEventWithoutOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "orders", nil)
		p := b.publisher(t, &heraldrabbit.Config{ContentType: "text/plain", CloudEvents: &heraldce.Config{Source: "/s"}})
		env := cetest.Envelope("orders")
		env.Headers, env.Payload = nil, []byte("hello")
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))
		d := b.read(t, q, 1)[0]
		e, err := cetest.ToEvent(t.Context(), ceMessage(d))
		require.NoError(t, err)
		require.Equal(t, "text/plain", e.DataContentType())
		require.Equal(t, "hello", string(e.Data()))
	})

	t.Run("NewRefusesABadSource", func(t *testing.T) {
		t.Parallel()
		_, err := heraldrabbit.New(dialer(t, brokerURL, amqp.Config{}), &heraldrabbit.Config{CloudEvents: &heraldce.Config{Source: "a b"}})
		require.ErrorContains(t, err, "heraldrabbit: Config.CloudEvents.Source")
	})

	t.Run("ParseRefusesACloudEventHeraldDidNotSend", func(t *testing.T) {
		t.Parallel()
		_, err := heraldrabbit.Parse(amqp.Delivery{Headers: amqp.Table{"cloudEvents:id": "42", "cloudEvents:specversion": "1.0"}})
		require.ErrorIs(t, err, heraldrabbit.ErrNotHerald)
	})
}
