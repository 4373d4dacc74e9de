package heraldredis_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// What a publisher sends, a consumer gets back field for field, with the
// topic as the producer named it, not the prefixed stream.
func TestParseRoundTripsWhatPublishSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := b.publisher(t, &heraldredis.Config{StreamPrefix: "prod:"})
	sent := herald.Message{
		ID: herald.NewID(), Topic: "rt.orders", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
		Payload: []byte{0, 1, 2, 'x', 0xff},
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	require.NoError(t, pub.Publish(t.Context(), []herald.Envelope{{Message: sent, Attempt: 1}}))

	// XREAD, as a consumer reads.
	res, err := b.rdb.XRead(t.Context(), &redis.XReadArgs{Streams: []string{b.prefix + "prod:rt.orders", "0"}, Count: 10}).Result()
	require.NoError(t, err)
	require.Len(t, res, 1)
	require.Len(t, res[0].Messages, 1)
	got, err := heraldredis.Parse(res[0].Messages[0])
	require.NoError(t, err)
	require.Equal(t, sent, got)
}

func TestParseRefusesEntriesNotFromHerald(t *testing.T) {
	t.Parallel()
	for _, values := range []map[string]any{
		nil,
		{"payload": "x"},
		{"id": "not-a-uuid", "payload": "x"},
		{"event_id": herald.NewID()},
	} {
		_, err := heraldredis.Parse(redis.XMessage{ID: "1-0", Values: values})
		require.ErrorIs(t, err, heraldredis.ErrNotHerald, "%v", values)
	}
}

func TestParseReportsMalformedFields(t *testing.T) {
	t.Parallel()
	id := herald.NewID()
	_, err := heraldredis.Parse(redis.XMessage{ID: "1-0", Values: map[string]any{"id": id, "headers": "{not json"}})
	require.ErrorContains(t, err, `field "headers"`)
	_, err = heraldredis.Parse(redis.XMessage{ID: "1-0", Values: map[string]any{"id": id, "headers": `{"a":1}`}})
	require.ErrorContains(t, err, `field "headers"`, "header values are strings")
	_, err = heraldredis.Parse(redis.XMessage{ID: "1-0", Values: map[string]any{"id": id, "key": int64(3)}})
	require.ErrorContains(t, err, `field "key"`)
	for _, f := range []struct {
		name  string
		value any
	}{
		{"event_version", "v2"}, {"event_version", "0"}, {"event_version", "2147483648"}, {"event_version", int64(2)},
		{"aggregate_version", "-1"}, {"aggregate_version", "9223372036854775808"}, {"aggregate_version", " 3"},
	} {
		_, err = heraldredis.Parse(redis.XMessage{ID: "1-0", Values: map[string]any{"id": id, f.name: f.value}})
		require.ErrorContains(t, err, `heraldredis: entry 1-0: field "`+f.name+`"`, "%v", f.value)
	}

	got, err := heraldredis.Parse(redis.XMessage{ID: "1-0", Values: map[string]any{"id": id, "topic": "t"}})
	require.NoError(t, err, "optional fields may be absent")
	require.Equal(t, herald.Message{ID: id, Topic: "t", EventVersion: 1, Payload: []byte{}}, got,
		"an entry without version fields is version 1")
}
