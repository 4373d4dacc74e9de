package heraldrabbit_test

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// What a publisher sends, a consumer gets back field for field, whatever
// the routing key.
func TestParseRoundTripsWhatPublishSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue(t, "rk.orders", nil)
	pub := b.publisher(t, &heraldrabbit.Config{RoutingKey: func(env *herald.Envelope) string { return "rk." + env.Topic }})
	sent := herald.Message{
		ID: herald.NewID(), Topic: "orders", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
		Payload: []byte{0, 1, 2, 'x', 0xff},
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	require.NoError(t, pub.Publish(t.Context(), []herald.Envelope{{Message: sent, Attempt: 1}}))

	// A consumer, as a service would run one.
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	deliveries, err := ch.ConsumeWithContext(t.Context(), q, "", false, false, false, false, nil)
	require.NoError(t, err)
	var d amqp.Delivery
	select {
	case d = <-deliveries:
	case <-t.Context().Done():
	}
	require.NoError(t, t.Context().Err())
	got, err := heraldrabbit.Parse(d)
	require.NoError(t, err)
	require.Equal(t, sent, got)
	require.NoError(t, d.Ack(false))
}

func TestParseRefusesDeliveriesNotFromHerald(t *testing.T) {
	t.Parallel()
	for _, d := range []amqp.Delivery{
		{},
		{Body: []byte("x"), MessageId: herald.NewID()},
		{Headers: amqp.Table{herald.HeaderID: "not-a-uuid"}},
		{Headers: amqp.Table{herald.HeaderID: []byte(herald.NewID())}},
	} {
		_, err := heraldrabbit.Parse(d)
		require.ErrorIs(t, err, heraldrabbit.ErrNotHerald, "%+v", d)
	}
}

// Headers the broker adds to a dead-lettered message, and values of other
// types than string, are not the producer's.
func TestParseKeepsOnlyTheProducersHeaders(t *testing.T) {
	t.Parallel()
	id := herald.NewID()
	got, err := heraldrabbit.Parse(amqp.Delivery{Headers: amqp.Table{
		herald.HeaderID:       id,
		herald.HeaderTopic:    "orders",
		"X-Tenant":            "acme",
		"x-death":             []any{amqp.Table{"count": int64(1)}},
		"x-first-death-queue": "q",
		"x-last-death-reason": "rejected",
		"CC":                  []any{"elsewhere"},
		"x-delay":             int32(5),
	}})
	require.NoError(t, err)
	require.Equal(t, herald.Message{
		ID: id, Topic: "orders", EventVersion: 1, Payload: []byte{}, Headers: map[string]string{"X-Tenant": "acme"},
	}, got)
}

// A version header that is not a version in range, or not a string, is an
// error naming the header, not version 1 or none.
func TestParseRefusesMalformedVersions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		value any
		ev    bool
	}{
		{"EventVersionNotANumber", "v2", true},
		{"EventVersionZero", "0", true},
		{"EventVersionOverInt32", "2147483648", true},
		{"EventVersionNotAString", int32(2), true},
		{"AggregateVersionNegative", "-1", false},
		{"AggregateVersionNotAString", int64(9), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := herald.HeaderAggregateVersion
			if tc.ev {
				name = herald.HeaderEventVersion
			}
			_, err := heraldrabbit.Parse(amqp.Delivery{Headers: amqp.Table{
				herald.HeaderID: herald.NewID(), herald.HeaderTopic: "orders", name: tc.value,
			}})
			require.ErrorContains(t, err, "heraldrabbit: event ")
			require.ErrorContains(t, err, name)
		})
	}
}
