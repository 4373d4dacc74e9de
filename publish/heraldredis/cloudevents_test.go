package heraldredis_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/cetest"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// Redis Streams have no CloudEvents binding: Herald follows the Kafka
// binding's rules (ce_* fields, a content-type field), and cetest reads an
// entry by those rules into sdk-go's event.
func ceMessage(m redis.XMessage) cetest.Message {
	out := cetest.Message{Prefix: heraldredis.FieldCEPrefix}
	for name, v := range m.Values {
		s, _ := v.(string)
		switch {
		case name == heraldredis.FieldContentType:
			out.ContentType = s
		case name == heraldredis.FieldPayload:
			out.Body = []byte(s)
		case strings.HasPrefix(name, heraldredis.FieldCEPrefix):
			out.Headers = append(out.Headers, cetest.Header{Name: name, Value: s})
		}
	}
	return out
}

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode)+"EntryIsReadByTheSDKAndParse", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := b.publisher(t, &heraldredis.Config{CloudEvents: &heraldce.Config{Source: "urn:shop:orders", Mode: mode}})
			env := cetest.Envelope("orders")
			require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

			raw, err := b.rdb.XRange(t.Context(), b.prefix+"orders", "-", "+").Result()
			require.NoError(t, err)
			require.Len(t, raw, 1)
			m := raw[0]
			require.NotContains(t, m.Values, heraldredis.FieldID)
			require.JSONEq(t, `{"X-Tenant":"acme","traceparent":"`+cetest.Traceparent+`"}`, m.Values[heraldredis.FieldHeaders].(string))
			if mode == heraldce.Binary {
				require.Equal(t, env.ID, m.Values["ce_id"])
				require.Equal(t, "application/json", m.Values[heraldredis.FieldContentType])
				require.Equal(t, string(env.Payload), m.Values[heraldredis.FieldPayload])
			} else {
				require.Equal(t, heraldce.StructuredContentType, m.Values[heraldredis.FieldContentType])
				require.NotContains(t, m.Values, "ce_id")
			}

			e, err := cetest.ToEvent(t.Context(), ceMessage(m))
			require.NoError(t, err)
			cetest.Check(t, e, &env, "urn:shop:orders")

			back, err := heraldredis.Parse(m)
			require.NoError(t, err)
			require.Equal(t, env.Message, back)
		})
	}

	t.Run("StructuredEventOverMaxPayloadBytesIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldredis.Config{MaxPayloadBytes: 64, CloudEvents: &heraldce.Config{Source: "/s", Mode: heraldce.Structured}})
		env := cetest.Envelope("orders")
		errs := batchErrors(t, p.Publish(t.Context(), []herald.Envelope{env}), 1)
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
		require.ErrorContains(t, errs[0], "JSON event format")
	})

	t.Run("NewRefusesABadSource", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := heraldredis.New(b.rdb, &heraldredis.Config{CloudEvents: &heraldce.Config{Source: "a b"}})
		require.ErrorContains(t, err, "heraldredis: Config.CloudEvents.Source")
	})

	t.Run("ParseRefusesACloudEventHeraldDidNotSend", func(t *testing.T) {
		t.Parallel()
		_, err := heraldredis.Parse(redis.XMessage{Values: map[string]any{"ce_id": "42", "ce_specversion": "1.0"}})
		require.ErrorIs(t, err, heraldredis.ErrNotHerald)
	})
}
