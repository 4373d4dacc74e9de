package heraldrabbit

import (
	"errors"
	"strings"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
)

// ErrNotHerald is returned by Parse for a delivery without a valid
// Herald-Id header: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldrabbit: not a Herald event (no valid Herald-Id header)")

// Parse turns a delivery back into the event a producer wrote: ID, Topic,
// Key, Type, AggregateType, AggregateID (from the Herald-* headers),
// Payload (the body) and the producer's own Headers. Consumers key their
// inbox on the returned ID.
//
// Headers holds the string-valued headers a producer may set (see
// herald.ValidateHeaderName: no Herald-*, no CC or BCC, which the broker
// acts on), other than the x-first-death-* and x-last-death-* headers the
// broker adds to a dead-lettered message: Herald publishes producer
// headers as strings only, through herald.EventHeaders.
func Parse(d amqp.Delivery) (herald.Message, error) {
	str := func(name string) string {
		s, _ := d.Headers[name].(string)
		return s
	}
	id := str(herald.HeaderID)
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	m := herald.Message{
		ID:            id,
		Topic:         str(herald.HeaderTopic),
		Key:           str(herald.HeaderKey),
		Type:          str(herald.HeaderType),
		AggregateType: str(herald.HeaderAggregateType),
		AggregateID:   str(herald.HeaderAggregateID),
		Payload:       d.Body,
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	for name, v := range d.Headers {
		s, ok := v.(string)
		if !ok || herald.ValidateHeaderName(name) != nil || brokerHeader(name) {
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(d.Headers))
		}
		m.Headers[name] = s
	}
	return m, nil
}

// brokerHeader reports whether RabbitMQ sets the header on a dead-lettered
// message.
func brokerHeader(name string) bool {
	lower := strings.ToLower(name)
	return strings.HasPrefix(lower, "x-death") || strings.HasPrefix(lower, "x-first-death-") ||
		strings.HasPrefix(lower, "x-last-death-")
}
