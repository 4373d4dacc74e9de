package heraldredis_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldredis"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// stream entry Publish adds for it, as XRANGE returns the entry.
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, prefix string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		stream, args, err := heraldredis.Entry(prefix, &env)
		require.NoError(t, err)
		require.Equal(t, prefix+env.Topic, stream)
		n, ok := args[0].(int)
		require.True(t, ok)
		require.Len(t, args, n+1)
		// Redis keeps every value as a string and returns it as one.
		values := map[string]any{}
		for i := 1; i < len(args); i += 2 {
			name := args[i].(string)
			_, dup := values[name]
			require.False(t, dup, "field %q twice", name)
			switch v := args[i+1].(type) {
			case string:
				values[name] = v
			case []byte:
				values[name] = string(v)
			default:
				require.FailNowf(t, "unexpected argument", "field %q is a %T", name, v)
			}
		}
		got, err := heraldredis.Parse(redis.XMessage{ID: "1-0", Values: values})
		require.NoError(t, err)
		want := env.Message
		if want.Payload == nil {
			want.Payload = []byte{} // the payload field is always present
		}
		require.Equal(t, want, got)
	})
}

// Whatever an entry holds, Parse takes it only with a UUID in its id field,
// refuses a field of another type than a string, and reads the headers
// field as the JSON object it is.
func FuzzParseAnyEntry(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add(id, "orders", "k", `{"X-Tenant":"acme"}`, "{}", uint8(0))
	f.Add(id, "orders", "", "", "", uint8(0))
	f.Add(id, "orders", "k", `{"X-Tenant":1}`, "x", uint8(0))
	f.Add(id, "orders", "k", `["not","an","object"]`, "x", uint8(0))
	f.Add(id, "orders", "k", `null`, "x", uint8(0))
	f.Add(id, "orders", "k", `{"a":"b"}`, "x", uint8(1))
	f.Add(id, "orders", "k", `{"a":"b"}`, "x", uint8(2))
	f.Add("not-a-uuid", "orders", "k", "", "x", uint8(0))
	f.Fuzz(func(t *testing.T, eventID, topic, key, headers, payload string, kind uint8) {
		values := map[string]any{
			heraldredis.FieldID: eventID, heraldredis.FieldTopic: topic, heraldredis.FieldKey: key,
			heraldredis.FieldHeaders: headers, heraldredis.FieldPayload: []byte(payload),
		}
		// Another client, or another program on the stream, may have put
		// other types there.
		switch kind % 3 {
		case 1:
			values[heraldredis.FieldKey] = int64(len(key))
		case 2:
			values[heraldredis.FieldType] = []any{key}
		}
		got, err := heraldredis.Parse(redis.XMessage{ID: "1-0", Values: values})
		if kind%3 != 0 {
			if _, perr := uuid.Parse(eventID); perr == nil {
				require.ErrorContains(t, err, "not a string")
			}
			return
		}
		if err != nil {
			return
		}
		_, err = uuid.Parse(got.ID)
		require.NoError(t, err, "took %q as an event id", got.ID)
		require.Equal(t, herald.Message{
			ID: eventID, Topic: topic, Key: key, EventVersion: 1, Payload: []byte(payload), Headers: decoded(t, headers),
		}, got, "an entry without version fields is version 1")
	})
}

// decoded is what Parse must make of a headers field it accepted.
func decoded(t *testing.T, headers string) map[string]string {
	t.Helper()
	if headers == "" {
		return nil
	}
	var h map[string]string
	require.NoError(t, json.Unmarshal([]byte(headers), &h), "Parse accepted headers %q", headers)
	return h
}
