package heraldrabbit_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// Parse reads back, field for field, any event a Writer accepts from the
// message Publish builds for it, but for the producer headers its doc
// says it leaves out (those RabbitMQ sets on a dead-lettered message).
func FuzzParseRoundTrip(f *testing.F) {
	publishertest.AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, id []byte, topic, key, typ, aggregateType, aggregateID string, payload []byte,
		header1, value1, header2, value2, _ string) {
		env, ok := publishertest.FuzzEvent(id, topic, key, typ, aggregateType, aggregateID, payload, header1, value1, header2, value2)
		if !ok {
			return
		}
		msg, routingKey, err := heraldrabbit.Message(&env)
		if err != nil {
			// AMQP carries header names as short strings: a Writer allows
			// longer ones.
			require.True(t, herald.IsPermanent(err))
			require.ErrorContains(t, err, "header name is longer than 255 bytes")
			return
		}
		require.Equal(t, env.Topic, routingKey)
		require.NoError(t, msg.Headers.Validate(), "a header table the client cannot send")
		got, err := heraldrabbit.Parse(amqp.Delivery{
			Headers: msg.Headers, Body: msg.Body, MessageId: msg.MessageId, Type: msg.Type,
			ContentType: msg.ContentType, RoutingKey: routingKey,
		})
		require.NoError(t, err)
		want := env.Message
		if want.Payload == nil {
			want.Payload = []byte{}
		}
		for name := range want.Headers {
			if deadLetterHeader(name) {
				delete(want.Headers, name)
			}
		}
		if len(want.Headers) == 0 {
			want.Headers = nil
		}
		require.Equal(t, want, got)
	})
}

// Whatever a delivery's headers hold, Parse takes it only with a UUID in
// Herald-Id, and hands back as the producer's only string headers that are
// neither Herald's, nor CC or BCC, nor set by the broker.
func FuzzParseAnyDelivery(f *testing.F) {
	id := "0190d5a3-7c1e-7b4a-9f00-0123456789ab"
	f.Add(id, "Herald-Topic", "orders", "X-Tenant", "acme", uint8(0), []byte("{}"))
	f.Add(id, "x-death", "q", "x-first-death-queue", "q", uint8(0), []byte{})
	f.Add(id, "CC", "other", "herald-key", "lower", uint8(0), []byte(nil))
	f.Add(id, "X-Count", "1", "X-List", "a", uint8(1), []byte("x"))
	f.Add(id, "X-Table", "", "X-Bytes", "b", uint8(2), []byte("x"))
	f.Add("not-a-uuid", "", "", "", "", uint8(0), []byte("x"))
	f.Fuzz(func(t *testing.T, eventID, name1, value1, name2, value2 string, kind uint8, body []byte) {
		headers := amqp.Table{herald.HeaderID: eventID, name1: value1}
		// Headers set by other programs come in every type AMQP has.
		switch kind % 3 {
		case 0:
			headers[name2] = value2
		case 1:
			headers[name2] = int32(len(value2))
		case 2:
			headers[name2] = amqp.Table{"inner": []byte(value2)}
		}
		got, err := heraldrabbit.Parse(amqp.Delivery{Headers: headers, Body: body})
		if err != nil {
			return
		}
		_, err = uuid.Parse(got.ID)
		require.NoError(t, err, "took %q as an event id", got.ID)
		require.NotNil(t, got.Payload)
		for name, v := range got.Headers {
			lower := strings.ToLower(name)
			require.False(t, strings.HasPrefix(lower, "herald-") || lower == "cc" || lower == "bcc" || deadLetterHeader(name),
				"header %q handed back", name)
			require.Equal(t, headers[name], v)
		}
	})
}

// deadLetterHeader reports whether RabbitMQ sets a header of this name on
// a dead-lettered message, which Parse's doc says it leaves out.
func deadLetterHeader(name string) bool {
	lower := strings.ToLower(name)
	return strings.HasPrefix(lower, "x-death") || strings.HasPrefix(lower, "x-first-death-") || strings.HasPrefix(lower, "x-last-death-")
}
