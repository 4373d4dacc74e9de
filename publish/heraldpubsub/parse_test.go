package heraldpubsub_test

import (
	"context"
	"sync"
	"testing"

	"cloud.google.com/go/pubsub/v2"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

// What a publisher sends, a subscriber's Receive hands back, and Parse
// turns into the event field for field, whatever the topic prefix.
func TestParseReadsWhatASubscriberReceives(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.topic(t, "prod-orders")
	p := f.publisher(t, &heraldpubsub.Config{TopicPrefix: "prod-"})
	sent := []herald.Message{{
		ID: herald.NewID(), Topic: "orders", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
		Payload: []byte{0, 1, 2, 'x', 0xff},
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}, {
		ID: herald.NewID(), Topic: "orders", Key: "order-42", Type: "order.paid", EventVersion: 1, Payload: []byte{},
	}}
	envs := make([]herald.Envelope, len(sent))
	for i, m := range sent {
		envs[i] = herald.Envelope{Message: m, Attempt: 1, Ordered: true}
	}
	require.NoError(t, p.Publish(t.Context(), envs))

	// A consumer, as a service would run one.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		mu   sync.Mutex
		got  []herald.Message
		errs []error
	)
	err := f.client.Subscriber("prod-orders-sub").Receive(ctx, func(_ context.Context, m *pubsub.Message) {
		parsed, err := heraldpubsub.Parse(m)
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		got, errs = append(got, parsed), append(errs, err)
		if len(got) == len(sent) {
			cancel()
		}
	})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, errs)
	require.Equal(t, sent, got, "in order, through a subscription with message ordering")
}

func TestParseRefusesMessagesNotFromHerald(t *testing.T) {
	t.Parallel()
	for _, m := range []*pubsub.Message{
		{},
		{Data: []byte("x"), ID: herald.NewID()},
		{Attributes: map[string]string{herald.HeaderID: "not-a-uuid"}},
		{Attributes: map[string]string{"herald-id": herald.NewID()}},
	} {
		_, err := heraldpubsub.Parse(m)
		require.ErrorIs(t, err, heraldpubsub.ErrNotHerald, "%+v", m)
	}
	_, err := heraldpubsub.Parse(nil)
	require.Error(t, err)
}

// Attributes Pub/Sub and its clients set (googclient_* when the publishing
// client traces) are not the producer's.
func TestParseKeepsOnlyTheProducersAttributes(t *testing.T) {
	t.Parallel()
	id := herald.NewID()
	got, err := heraldpubsub.Parse(&pubsub.Message{
		ID: "12345", OrderingKey: "k",
		Attributes: map[string]string{
			herald.HeaderID:          id,
			herald.HeaderTopic:       "orders",
			herald.HeaderKey:         "k",
			"X-Tenant":               "acme",
			"googclient_traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"HERALD-EXTRA":           "not the producer's",
		},
	})
	require.NoError(t, err)
	require.Equal(t, herald.Message{
		ID: id, Topic: "orders", Key: "k", EventVersion: 1, Payload: []byte{}, Headers: map[string]string{"X-Tenant": "acme"},
	}, got)
}

// A version attribute that is not a version in range is an error naming
// it, not version 1 or none.
func TestParseRefusesMalformedVersions(t *testing.T) {
	t.Parallel()
	for _, a := range []struct{ name, value string }{
		{herald.HeaderEventVersion, "v2"},
		{herald.HeaderEventVersion, "0"},
		{herald.HeaderEventVersion, "2147483648"},
		{herald.HeaderAggregateVersion, "-1"},
		{herald.HeaderAggregateVersion, "1e3"},
	} {
		_, err := heraldpubsub.Parse(&pubsub.Message{Attributes: map[string]string{
			herald.HeaderID: herald.NewID(), herald.HeaderTopic: "orders", a.name: a.value,
		}})
		require.ErrorContains(t, err, "heraldpubsub: event ", "%s: %q", a.name, a.value)
		require.ErrorContains(t, err, a.name)
	}
}
