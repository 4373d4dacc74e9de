package heraldnats_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// What a publisher sends, a consumer gets back field for field.
func TestParseRoundTripsWhatPublishSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	stream := b.createStream(t, "RT", "rt.>")
	pub := b.publisher(t, nil)
	sent := herald.Message{
		ID: herald.NewID(), Topic: "rt.orders", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", Payload: []byte{0, 1, 2, 'x'},
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	require.NoError(t, pub.Publish(t.Context(), []herald.Envelope{{Message: sent, Attempt: 1}}))

	raw, err := stream.GetMsg(t.Context(), 1)
	require.NoError(t, err)
	got, err := heraldnats.Parse(&nats.Msg{Subject: raw.Subject, Header: raw.Header, Data: raw.Data})
	require.NoError(t, err)
	require.Equal(t, sent, got)

	cons, err := stream.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	require.NoError(t, err)
	got, err = heraldnats.ParseJetStream(m)
	require.NoError(t, err)
	require.Equal(t, sent, got)
}

func TestParseRefusesMessagesNotFromHerald(t *testing.T) {
	t.Parallel()
	for _, h := range []nats.Header{nil, {"Herald-Id": {"not-a-uuid"}}, {"X-Other": {"1"}}} {
		_, err := heraldnats.Parse(&nats.Msg{Subject: "s", Header: h, Data: []byte("x")})
		require.ErrorIs(t, err, heraldnats.ErrNotHerald)
	}
	_, err := heraldnats.Parse(nil)
	require.Error(t, err)
}

func TestParseWithPrefixRemovesIt(t *testing.T) {
	t.Parallel()
	h := nats.Header{"Herald-Id": {herald.NewID()}}
	got, err := heraldnats.ParseWithPrefix(&nats.Msg{Subject: "prod.orders.placed", Header: h}, "prod")
	require.NoError(t, err)
	require.Equal(t, "orders.placed", got.Topic)
	_, err = heraldnats.ParseWithPrefix(&nats.Msg{Subject: "orders.placed", Header: h}, "prod")
	require.Error(t, err)
}
