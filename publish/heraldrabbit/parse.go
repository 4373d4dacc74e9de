package heraldrabbit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse for a delivery without a valid
// Herald-Id header: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldrabbit: not a Herald event (no valid Herald-Id header)")

// Parse turns a delivery back into the event a producer wrote: ID, Topic,
// Key, Type, AggregateType, AggregateID, EventVersion and AggregateVersion
// (from the Herald-* headers; a malformed version is an error, see
// herald.ParseVersions), Payload (the body) and the producer's own Headers. Consumers key their
// inbox on the returned ID.
//
// Headers holds the string-valued headers a producer may set (see
// herald.ValidateHeaderName: no Herald-*, no CC or BCC, which the broker
// acts on), other than the x-first-death-* and x-last-death-* headers the
// broker adds to a dead-lettered message: Herald publishes producer
// headers as strings only, through herald.EventHeaders.
//
// A delivery Herald sent as a CloudEvent (Config.CloudEvents) is read back
// from its cloudEvents:* headers or, when its content type is the JSON
// event format, from its body (see package heraldce); Topic is then the
// heraldtopic extension.
func Parse(d amqp.Delivery) (herald.Message, error) {
	str := func(name string) string {
		s, _ := d.Headers[name].(string)
		return s
	}
	id := str(herald.HeaderID)
	if _, ok := d.Headers[herald.HeaderID]; !ok && isCloudEvent(d) {
		return parseCloudEvent(d)
	}
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	ev, av, err := versions(d.Headers)
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldrabbit: event %s: %w", id, err)
	}
	m := herald.Message{
		ID:               id,
		Topic:            str(herald.HeaderTopic),
		Key:              str(herald.HeaderKey),
		Type:             str(herald.HeaderType),
		AggregateType:    str(herald.HeaderAggregateType),
		AggregateID:      str(herald.HeaderAggregateID),
		EventVersion:     ev,
		AggregateVersion: av,
		Payload:          d.Body,
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

// versions reads the Herald-Event-Version and Herald-Aggregate-Version
// headers (herald.ParseVersions). Herald sends them as strings; a header
// of another AMQP type is refused rather than read as absent, which would
// make it version 1.
func versions(h amqp.Table) (int, int64, error) {
	var text [2]string
	for i, name := range [...]string{herald.HeaderEventVersion, herald.HeaderAggregateVersion} {
		v, ok := h[name]
		if !ok {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return 0, 0, fmt.Errorf("header %s is a %T, not a string", name, v)
		}
		text[i] = s
	}
	return herald.ParseVersions(text[0], text[1])
}

// brokerHeader reports whether RabbitMQ sets the header on a dead-lettered
// message.
func brokerHeader(name string) bool {
	lower := strings.ToLower(name)
	return strings.HasPrefix(lower, "x-death") || strings.HasPrefix(lower, "x-first-death-") ||
		strings.HasPrefix(lower, "x-last-death-")
}

// isCloudEvent reports whether d looks like a CloudEvent: a cloudEvents:id
// header or a structured content type.
func isCloudEvent(d amqp.Delivery) bool {
	if heraldce.IsStructured(d.ContentType) {
		return true
	}
	for name := range d.Headers {
		if strings.EqualFold(name, heraldce.PrefixAMQP+"id") {
			return true
		}
	}
	return false
}

func parseCloudEvent(d amqp.Delivery) (herald.Message, error) {
	hs := make([]heraldce.Header, 0, len(d.Headers))
	for name, v := range d.Headers {
		s, ok := v.(string)
		if !ok || brokerHeader(name) {
			continue
		}
		lower := strings.ToLower(name)
		if !strings.HasPrefix(lower, strings.ToLower(heraldce.PrefixAMQP)) && herald.ValidateHeaderName(name) != nil {
			continue
		}
		hs = append(hs, heraldce.Header{Name: name, Value: s})
	}
	var (
		m   herald.Message
		err error
	)
	if heraldce.IsStructured(d.ContentType) {
		m, err = heraldce.ParseStructured(hs, d.Body)
	} else {
		m, err = heraldce.ParseBinary(heraldce.PrefixAMQP, hs, d.ContentType, d.Body)
	}
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldrabbit: %w", err)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m, nil
}
