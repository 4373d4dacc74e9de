package heraldkafka_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldkafka"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// record Publish builds for it, with or without a topic prefix. A record is
// refused only for a topic Kafka would refuse.
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, prefix string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		rec, err := heraldkafka.Record(prefix, &env)
		if err != nil {
			require.ErrorContains(t, err, "heraldkafka: topic ")
			require.True(t, herald.IsPermanent(err))
			return
		}
		require.Equal(t, prefix+env.Topic, rec.Topic)
		var got herald.Message
		if prefix == "" {
			got, err = heraldkafka.Parse(rec)
		} else {
			got, err = heraldkafka.ParseWithPrefix(rec, prefix)
		}
		require.NoError(t, err)
		want := env.Message
		if want.Payload == nil {
			want.Payload = []byte{} // a record's value is never null
		}
		require.Equal(t, want, got)
	})
}

// Whatever a record holds, Parse takes it only with a UUID in its first
// Herald-Id header; it takes each field from the first header of its name
// and never hands a Herald-* header back as the producer's.
func FuzzParseAnyRecord(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add("orders", "Herald-Id", id, "Herald-Key", "k", "X-Tenant", "acme", []byte("{}"), "")
	f.Add("prod.orders", "Herald-Id", id, "Herald-Id", uuid.Nil.String(), "HERALD-KEY", "upper", []byte{}, "prod.")
	f.Add("orders", "herald-id", id, "X-A", "1", "X-A", "2", []byte(nil), "")
	f.Add("orders", "Herald-Id", "not-a-uuid", "", "", "", "", []byte("x"), "")
	f.Add("prod.", "Herald-Id", id, "", "", "", "", []byte("x"), "prod.")
	f.Fuzz(func(t *testing.T, topic, k1, v1, k2, v2, k3, v3 string, value []byte, prefix string) {
		rec := &kgo.Record{Topic: topic, Value: value, Headers: []kgo.RecordHeader{
			{Key: k1, Value: []byte(v1)}, {Key: k2, Value: []byte(v2)}, {Key: k3, Value: []byte(v3)},
		}}
		got, err := heraldkafka.ParseWithPrefix(rec, prefix)
		if err != nil {
			return
		}
		first := func(name string) string {
			for _, h := range rec.Headers {
				if h.Key == name {
					return string(h.Value)
				}
			}
			return ""
		}
		_, err = uuid.Parse(got.ID)
		require.NoError(t, err, "took %q as an event id", got.ID)
		require.Equal(t, first(herald.HeaderID), got.ID)
		require.Equal(t, first(herald.HeaderKey), got.Key)
		require.Equal(t, first(herald.HeaderType), got.Type)
		require.Equal(t, value, got.Payload)
		require.Equal(t, topic, prefix+got.Topic)
		for name, v := range got.Headers {
			require.False(t, strings.HasPrefix(strings.ToLower(name), "herald-"), "header %q handed back", name)
			require.Equal(t, first(name), v)
		}
	})
}
