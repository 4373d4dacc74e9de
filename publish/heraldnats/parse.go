package heraldnats

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
)

// ErrNotHerald is returned by Parse for a message without a valid Herald-Id
// header: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldnats: not a Herald event (no valid Herald-Id header)")

// Parse turns a received NATS message back into the event a producer wrote:
// ID, Topic (the subject, less any SubjectPrefix the publisher used: pass
// the prefix to ParseWithPrefix), Key, Type, AggregateType, AggregateID,
// Payload and the producer's own Headers (without Herald-* and Nats-*).
// Consumers key their inbox on the returned ID.
func Parse(m *nats.Msg) (herald.Message, error) {
	if m == nil {
		return herald.Message{}, errors.New("heraldnats: Parse: nil message")
	}
	return parse(m.Subject, m.Header, m.Data, "")
}

// ParseJetStream is Parse for a message from a JetStream consumer.
func ParseJetStream(m jetstream.Msg) (herald.Message, error) {
	if m == nil {
		return herald.Message{}, errors.New("heraldnats: ParseJetStream: nil message")
	}
	return parse(m.Subject(), m.Headers(), m.Data(), "")
}

// ParseWithPrefix is Parse for a publisher configured with SubjectPrefix:
// the prefix and its dot are removed from the topic.
func ParseWithPrefix(m *nats.Msg, prefix string) (herald.Message, error) {
	if m == nil {
		return herald.Message{}, errors.New("heraldnats: ParseWithPrefix: nil message")
	}
	return parse(m.Subject, m.Header, m.Data, prefix)
}

func parse(subject string, h nats.Header, data []byte, prefix string) (herald.Message, error) {
	id := h.Get(herald.HeaderID)
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	topic := subject
	if prefix != "" {
		var ok bool
		if topic, ok = strings.CutPrefix(subject, prefix+"."); !ok {
			return herald.Message{}, fmt.Errorf("heraldnats: subject %q lacks the prefix %q", subject, prefix)
		}
	}
	msg := herald.Message{
		ID:            id,
		Topic:         topic,
		Key:           h.Get(herald.HeaderKey),
		Type:          h.Get(herald.HeaderType),
		AggregateType: h.Get(herald.HeaderAggregateType),
		AggregateID:   h.Get(herald.HeaderAggregateID),
		Payload:       data,
	}
	for name, values := range h {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "herald-") || strings.HasPrefix(lower, "nats-") || len(values) == 0 {
			continue
		}
		if msg.Headers == nil {
			msg.Headers = make(map[string]string, len(h))
		}
		msg.Headers[name] = values[0]
	}
	return msg, nil
}
