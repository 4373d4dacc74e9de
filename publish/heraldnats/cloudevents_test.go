package heraldnats_test

import (
	"testing"
	"time"

	cenats "github.com/cloudevents/sdk-go/protocol/nats/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	t.Run("StructuredMessageIsReadByTheSDKAndParse", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := b.createStream(t, "ORDERS", "prod.>")
		sub, err := b.nc.SubscribeSync("prod.orders")
		require.NoError(t, err)
		require.NoError(t, b.nc.Flush())
		p := b.publisher(t, &heraldnats.Config{SubjectPrefix: "prod", CloudEvents: &heraldce.Config{Source: "/shop/orders"}})

		env := envelope("orders")
		env.Key, env.Type, env.AggregateType, env.AggregateID = "order-7", "order.placed", "order", "7"
		env.EventVersion, env.AggregateVersion = 2, 7
		env.Payload = []byte(`{"order":7}`)
		env.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		env.Headers = map[string]string{"Content-Type": "application/json", "traceparent": traceparent, "X-Tenant": "acme"}
		// Sent twice, as a relay may: Nats-Msg-Id still drops the copy.
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))
		info, err := stream.Info(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 1, info.State.Msgs)

		m, err := sub.NextMsg(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, heraldce.StructuredContentType, m.Header.Get("Content-Type"))
		require.Equal(t, env.ID, m.Header.Get("Nats-Msg-Id"))
		require.Empty(t, m.Header.Get(herald.HeaderID))

		e, err := binding.ToEvent(t.Context(), cenats.NewMessage(m))
		require.NoError(t, err)
		require.NoError(t, e.Validate())
		require.Equal(t, env.ID, e.ID())
		require.Equal(t, "order.placed", e.Type())
		require.Equal(t, "/shop/orders", e.Source())
		require.Equal(t, "7", e.Subject())
		require.True(t, env.CreatedAt.Equal(e.Time()))
		require.Equal(t, "application/json", e.DataContentType())
		require.JSONEq(t, `{"order":7}`, string(e.Data()))
		require.Equal(t, map[string]any{
			"traceparent": traceparent, "heraldtopic": "orders", "heraldkey": "order-7", "heraldaggregatetype": "order",
			"heraldeventversion": "2", "heraldaggversion": "7",
		}, e.Extensions())

		back, err := heraldnats.Parse(m)
		require.NoError(t, err)
		require.Equal(t, env.Message, back)

		stored, err := stream.GetMsg(t.Context(), 1)
		require.NoError(t, err)
		back, err = heraldnats.ParseWithPrefix(&nats.Msg{Subject: stored.Subject, Header: stored.Header, Data: stored.Data}, "prod")
		require.NoError(t, err)
		require.Equal(t, env.Message, back)
	})

	t.Run("NewRefusesBinaryMode", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := heraldnats.New(b.nc, &heraldnats.Config{CloudEvents: &heraldce.Config{Source: "/s", Mode: heraldce.Binary}})
		require.ErrorContains(t, err, "structured mode only")
		_, err = heraldnats.New(b.nc, &heraldnats.Config{CloudEvents: &heraldce.Config{}})
		require.ErrorContains(t, err, "heraldnats: Config.CloudEvents.Source is required")
	})
}
