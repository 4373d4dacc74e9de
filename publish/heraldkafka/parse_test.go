package heraldkafka_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// What a publisher sends, a consumer gets back field for field.
func TestParseRoundTripsWhatPublishSent(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"", "prod."} {
		b := setup(t)
		p := b.publisher(t, &heraldkafka.Config{TopicPrefix: prefix})
		sent := herald.Message{
			ID: herald.NewID(), Topic: "orders", Key: "order-42", Type: "order.placed",
			AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
			Payload: []byte{0, 1, 2, 'x'},
			Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{{Message: sent, Attempt: 1}}))

		r := b.read(t, prefix+"orders", 1)[0]
		got, err := heraldkafka.ParseWithPrefix(r, prefix)
		require.NoError(t, err)
		require.Equal(t, sent, got)
		if prefix == "" {
			got, err = heraldkafka.Parse(r)
			require.NoError(t, err)
			require.Equal(t, sent, got)
		}
	}
}

func TestParseRefusesRecordsNotFromHerald(t *testing.T) {
	t.Parallel()
	for _, h := range [][]kgo.RecordHeader{nil, {{Key: "Herald-Id", Value: []byte("not-a-uuid")}}, {{Key: "X-Other", Value: []byte("1")}}} {
		_, err := heraldkafka.Parse(&kgo.Record{Topic: "t", Headers: h, Value: []byte("x")})
		require.ErrorIs(t, err, heraldkafka.ErrNotHerald)
	}
	_, err := heraldkafka.Parse(nil)
	require.Error(t, err)
}

func TestParseKeepsTheFirstOfRepeatedHeaders(t *testing.T) {
	t.Parallel()
	id := herald.NewID()
	got, err := heraldkafka.Parse(&kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{
		{Key: "Herald-Id", Value: []byte(id)}, {Key: "Herald-Id", Value: []byte(herald.NewID())},
		{Key: "X-A", Value: []byte("1")}, {Key: "X-A", Value: []byte("2")},
	}})
	require.NoError(t, err)
	require.Equal(t, id, got.ID)
	require.Equal(t, map[string]string{"X-A": "1"}, got.Headers)
}

// A version header that is not a version in range is an error naming it,
// not version 1 or none; an absent one is version 1 and no aggregate
// version.
func TestParseRefusesMalformedVersions(t *testing.T) {
	t.Parallel()
	for _, h := range []kgo.RecordHeader{
		{Key: herald.HeaderEventVersion, Value: []byte("v2")},
		{Key: herald.HeaderEventVersion, Value: []byte("0")},
		{Key: herald.HeaderEventVersion, Value: []byte("2147483648")},
		{Key: herald.HeaderAggregateVersion, Value: []byte("-1")},
		{Key: herald.HeaderAggregateVersion, Value: []byte("1.5")},
	} {
		_, err := heraldkafka.Parse(&kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{
			{Key: herald.HeaderID, Value: []byte(herald.NewID())}, h,
		}})
		require.ErrorContains(t, err, "heraldkafka: event ", "%s: %q", h.Key, h.Value)
		require.ErrorContains(t, err, h.Key)
	}
	got, err := heraldkafka.Parse(&kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{{Key: herald.HeaderID, Value: []byte(herald.NewID())}}})
	require.NoError(t, err)
	require.Equal(t, 1, got.EventVersion, "a record sent before versions were carried is version 1")
	require.Zero(t, got.AggregateVersion)
}

func TestParseWithPrefixRemovesIt(t *testing.T) {
	t.Parallel()
	h := []kgo.RecordHeader{{Key: "Herald-Id", Value: []byte(herald.NewID())}}
	got, err := heraldkafka.ParseWithPrefix(&kgo.Record{Topic: "prod.orders", Headers: h}, "prod.")
	require.NoError(t, err)
	require.Equal(t, "orders", got.Topic)
	_, err = heraldkafka.ParseWithPrefix(&kgo.Record{Topic: "orders", Headers: h}, "prod.")
	require.Error(t, err)
}
