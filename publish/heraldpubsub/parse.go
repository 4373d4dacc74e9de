package heraldpubsub

import (
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse for a message without a valid
// Herald-Id attribute: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldpubsub: not a Herald event (no valid Herald-Id attribute)")

// Parse turns a received message back into the event a producer wrote:
// ID, Topic (the event's topic, without any TopicPrefix), Key, Type,
// AggregateType, AggregateID, EventVersion and AggregateVersion (from the
// Herald-* attributes; a malformed version is an error, see
// herald.ParseVersions), Payload (the data) and the producer's own Headers. Consumers key their inbox on the
// returned ID, not on the message's ID: Pub/Sub gives a republished event
// a new message ID.
//
// Headers holds the attributes other than Herald-* and those whose names
// start with "goog", which Pub/Sub and its client libraries set (such as
// googclient_traceparent when the publishing client traces).
//
// A message Herald sent as a CloudEvent (Config.CloudEvents) is read back
// from its ce-* attributes or, when its Content-Type attribute is the JSON
// event format, from its data (see package heraldce); Topic is then the
// heraldtopic extension.
func Parse(m *pubsub.Message) (herald.Message, error) {
	if m == nil {
		return herald.Message{}, errors.New("heraldpubsub: Parse: nil message")
	}
	id, ok := m.Attributes[herald.HeaderID]
	if !ok && isCloudEvent(m) {
		return parseCloudEvent(m)
	}
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	ev, av, err := herald.ParseVersions(m.Attributes[herald.HeaderEventVersion], m.Attributes[herald.HeaderAggregateVersion])
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldpubsub: event %s: %w", id, err)
	}
	out := herald.Message{
		ID:               id,
		Topic:            m.Attributes[herald.HeaderTopic],
		Key:              m.Attributes[herald.HeaderKey],
		Type:             m.Attributes[herald.HeaderType],
		AggregateType:    m.Attributes[herald.HeaderAggregateType],
		AggregateID:      m.Attributes[herald.HeaderAggregateID],
		EventVersion:     ev,
		AggregateVersion: av,
		Payload:          m.Data,
	}
	if out.Payload == nil {
		out.Payload = []byte{}
	}
	for name, v := range m.Attributes {
		lower := strings.ToLower(name)
		if strings.HasPrefix(lower, "herald-") || strings.HasPrefix(name, reservedGoogPrefix) {
			continue
		}
		if out.Headers == nil {
			out.Headers = make(map[string]string, len(m.Attributes))
		}
		out.Headers[name] = v
	}
	return out, nil
}

// isCloudEvent reports whether m looks like a CloudEvent: a ce-id
// attribute or a structured Content-Type.
func isCloudEvent(m *pubsub.Message) bool {
	for name, v := range m.Attributes {
		if strings.EqualFold(name, heraldce.PrefixPubSub+"id") ||
			strings.EqualFold(name, contentTypeAttr) && heraldce.IsStructured(v) {
			return true
		}
	}
	return false
}

func parseCloudEvent(m *pubsub.Message) (herald.Message, error) {
	var (
		hs          []heraldce.Header
		contentType string
	)
	for name, v := range m.Attributes {
		switch {
		case strings.HasPrefix(name, reservedGoogPrefix):
		case strings.EqualFold(name, contentTypeAttr):
			contentType = v
		default:
			hs = append(hs, heraldce.Header{Name: name, Value: v})
		}
	}
	var (
		out herald.Message
		err error
	)
	if heraldce.IsStructured(contentType) {
		out, err = heraldce.ParseStructured(hs, m.Data)
	} else {
		out, err = heraldce.ParseBinary(heraldce.PrefixPubSub, hs, contentType, m.Data)
	}
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldpubsub: %w", err)
	}
	if out.Payload == nil {
		out.Payload = []byte{}
	}
	return out, nil
}
