package heraldnats

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse for a message without a valid Herald-Id
// header: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldnats: not a Herald event (no valid Herald-Id header)")

// Parse turns a received NATS message back into the event a producer wrote:
// ID, Topic (the subject, less any SubjectPrefix the publisher used: pass
// the prefix to ParseWithPrefix), Key, Type, AggregateType, AggregateID,
// EventVersion and AggregateVersion (see herald.ParseVersions; a malformed
// one is an error), Payload and the producer's own Headers (without
// Herald-* and Nats-*).
// Consumers key their inbox on the returned ID. A message Herald sent as a
// CloudEvent (Config.CloudEvents) is read back from its JSON event format,
// its topic from the heraldtopic extension.
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
	topic := subject
	if prefix != "" {
		var ok bool
		if topic, ok = strings.CutPrefix(subject, prefix+"."); !ok {
			return herald.Message{}, fmt.Errorf("heraldnats: subject %q lacks the prefix %q", subject, prefix)
		}
	}
	id := h.Get(herald.HeaderID)
	if id == "" && heraldce.IsStructured(h.Get("Content-Type")) {
		return parseCloudEvent(h, data, topic)
	}
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	ev, av, err := herald.ParseVersions(h.Get(herald.HeaderEventVersion), h.Get(herald.HeaderAggregateVersion))
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldnats: event %s: %w", id, err)
	}
	msg := herald.Message{
		ID:               id,
		Topic:            topic,
		Key:              h.Get(herald.HeaderKey),
		Type:             h.Get(herald.HeaderType),
		AggregateType:    h.Get(herald.HeaderAggregateType),
		AggregateID:      h.Get(herald.HeaderAggregateID),
		EventVersion:     ev,
		AggregateVersion: av,
		Payload:          data,
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

// parseCloudEvent reads a structured-mode CloudEvent; the headers other
// than Nats-* are the producer's.
func parseCloudEvent(h nats.Header, data []byte, topic string) (herald.Message, error) {
	var hs []heraldce.Header
	for name, values := range h {
		if len(values) > 0 && !strings.HasPrefix(strings.ToLower(name), "nats-") {
			hs = append(hs, heraldce.Header{Name: name, Value: values[0]})
		}
	}
	msg, err := heraldce.ParseStructured(hs, data)
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldnats: %w", err)
	}
	if msg.Topic == "" {
		msg.Topic = topic
	}
	return msg, nil
}
