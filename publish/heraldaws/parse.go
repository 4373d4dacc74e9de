package heraldaws

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse and ParseNotification for a message
// without a valid Herald-Id attribute: it was not published by a Herald
// relay.
var ErrNotHerald = errors.New("heraldaws: not a Herald event (no valid Herald-Id attribute)")

// Parse turns an SQS message back into the event a producer wrote: ID,
// Topic, Key, Type, AggregateType, AggregateID, EventVersion and
// AggregateVersion (from the Herald-* attributes; a malformed version is an
// error, see herald.ParseVersions), Payload (the body, decoded as AttrEncoding says) and the
// producer's Headers (from AttrHeaders). Consumers key their inbox on the
// returned ID; msg.MessageId is SQS's, not the event's.
//
// The message must have been received with its attributes:
// MessageAttributeNames: []string{"All"} in the ReceiveMessage call.
//
// It reads both a message an SQSPublisher sent and one an SNSPublisher
// sent to a topic the queue subscribes to: with raw message delivery, SNS
// hands the message and its attributes to SQS as they are; without it, the
// body is SNS's JSON notification, which Parse reads as
// ParseNotification does.
//
// A message Herald sent as a CloudEvent (CloudEvents in SQSConfig or
// SNSConfig) is read back from its body, the JSON event format, with the
// producer's headers from AttrHeaders (see package heraldce); Topic is then
// the heraldtopic extension.
func Parse(msg types.Message) (herald.Message, error) {
	body := aws.ToString(msg.Body)
	if _, ok := msg.MessageAttributes[herald.HeaderID]; !ok {
		if n, ok := notification([]byte(body)); ok {
			return n.event()
		}
	}
	attrs := make(map[string]string, len(msg.MessageAttributes))
	for name, v := range msg.MessageAttributes {
		switch aws.ToString(v.DataType) {
		case "String":
			attrs[name] = aws.ToString(v.StringValue)
		case "Binary":
			attrs[name] = string(v.BinaryValue)
		}
	}
	return event(attrs, body)
}

// ParseNotification turns an SNS notification, the JSON document SNS
// delivers to an HTTP(S) endpoint or, without raw message delivery, to an
// SQS queue, back into the event an SNSPublisher published, as Parse does
// for an SQS message. It does not check the notification's signature: an
// HTTP endpoint verifies it before trusting the content.
func ParseNotification(body []byte) (herald.Message, error) {
	n, ok := notification(body)
	if !ok {
		return herald.Message{}, ErrNotHerald
	}
	return n.event()
}

// snsNotification is the part of an SNS notification that carries the
// event.
type snsNotification struct {
	Type              string
	Message           string
	MessageAttributes map[string]struct{ Type, Value string }
}

// notification parses body as an SNS notification holding a Herald-Id
// attribute, or a CloudEvent's content-type attribute.
func notification(body []byte) (snsNotification, bool) {
	var n snsNotification
	if json.Unmarshal(body, &n) != nil || n.Type != "Notification" {
		return n, false
	}
	_, ok := n.MessageAttributes[herald.HeaderID]
	return n, ok || heraldce.IsStructured(n.MessageAttributes[AttrContentType].Value)
}

func (n snsNotification) event() (herald.Message, error) {
	attrs := make(map[string]string, len(n.MessageAttributes))
	for name, v := range n.MessageAttributes {
		switch v.Type {
		case "String":
			attrs[name] = v.Value
		case "Binary":
			b, err := base64.StdEncoding.DecodeString(v.Value)
			if err != nil {
				return herald.Message{}, fmt.Errorf("heraldaws: notification attribute %q: %w", name, err)
			}
			attrs[name] = string(b)
		}
	}
	return event(attrs, n.Message)
}

// event builds the event from a message's attributes and body.
func event(attrs map[string]string, body string) (herald.Message, error) {
	if _, ok := attrs[herald.HeaderID]; !ok && heraldce.IsStructured(attrs[AttrContentType]) {
		return cloudEvent(attrs, body)
	}
	id := attrs[herald.HeaderID]
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	ev, av, err := herald.ParseVersions(attrs[herald.HeaderEventVersion], attrs[herald.HeaderAggregateVersion])
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldaws: event %s: %w", id, err)
	}
	m := herald.Message{
		ID:               id,
		Topic:            attrs[herald.HeaderTopic],
		Key:              attrs[herald.HeaderKey],
		Type:             attrs[herald.HeaderType],
		AggregateType:    attrs[herald.HeaderAggregateType],
		AggregateID:      attrs[herald.HeaderAggregateID],
		EventVersion:     ev,
		AggregateVersion: av,
	}
	switch enc := attrs[AttrEncoding]; enc {
	case "":
		m.Payload = []byte(body)
	case EncodingBase64:
		p, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return herald.Message{}, fmt.Errorf("heraldaws: event %s: base64 body: %w", id, err)
		}
		m.Payload = p
	case EncodingEmpty:
		m.Payload = []byte{}
	default:
		return herald.Message{}, fmt.Errorf("heraldaws: event %s: unknown %s %q", id, AttrEncoding, enc)
	}
	if h := attrs[AttrHeaders]; h != "" {
		var headers map[string]string
		if err := json.Unmarshal([]byte(h), &headers); err != nil {
			return herald.Message{}, fmt.Errorf("heraldaws: event %s: attribute %s: %w", id, AttrHeaders, err)
		}
		for name, v := range headers {
			if herald.ValidateHeaderName(name) != nil {
				continue
			}
			if m.Headers == nil {
				m.Headers = make(map[string]string, len(headers))
			}
			m.Headers[name] = v
		}
	}
	return m, nil
}

// cloudEvent builds the event of a structured CloudEvent from a message's
// attributes and body.
func cloudEvent(attrs map[string]string, body string) (herald.Message, error) {
	var hs []heraldce.Header
	if h := attrs[AttrHeaders]; h != "" {
		var headers map[string]string
		if err := json.Unmarshal([]byte(h), &headers); err != nil {
			return herald.Message{}, fmt.Errorf("heraldaws: attribute %s: %w", AttrHeaders, err)
		}
		for name, v := range headers {
			if herald.ValidateHeaderName(name) == nil {
				hs = append(hs, heraldce.Header{Name: name, Value: v})
			}
		}
	}
	m, err := heraldce.ParseStructured(hs, []byte(body))
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldaws: %w", err)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m, nil
}
