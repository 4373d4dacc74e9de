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
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
		Payload: []byte{0, 1, 2, 'x'},
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

// A version header that is not a version in range is an error naming it,
// not version 1 or none; an absent one is version 1 and no aggregate
// version.
func TestParseRefusesMalformedVersions(t *testing.T) {
	t.Parallel()
	for _, v := range []struct{ name, value string }{
		{herald.HeaderEventVersion, "v2"},
		{herald.HeaderEventVersion, "0"},
		{herald.HeaderEventVersion, "2147483648"},
		{herald.HeaderAggregateVersion, "-1"},
		{herald.HeaderAggregateVersion, "9223372036854775808"},
	} {
		h := nats.Header{herald.HeaderID: {herald.NewID()}, v.name: {v.value}}
		_, err := heraldnats.Parse(&nats.Msg{Subject: "orders", Header: h})
		require.ErrorContains(t, err, "heraldnats: event ", "%s: %q", v.name, v.value)
		require.ErrorContains(t, err, v.name)
	}
	got, err := heraldnats.Parse(&nats.Msg{Subject: "orders", Header: nats.Header{herald.HeaderID: {herald.NewID()}}})
	require.NoError(t, err)
	require.Equal(t, 1, got.EventVersion, "a message sent before versions were carried is version 1")
	require.Zero(t, got.AggregateVersion)
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
