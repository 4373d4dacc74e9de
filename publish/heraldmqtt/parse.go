package heraldmqtt

import (
	"errors"
	"fmt"

	"github.com/eclipse/paho.golang/paho"
	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse for a message without a valid
// Herald-Id user property: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldmqtt: not a Herald event (no valid Herald-Id user property)")

// Parse turns a received PUBLISH (paho.PublishReceived.Packet) back into
// the event a producer wrote: ID, Topic (the event topic, not the MQTT
// topic name), Key, Type, AggregateType, AggregateID, EventVersion and
// AggregateVersion (from the Herald-* user properties; a malformed version
// is an error, see herald.ParseVersions), Payload (byte for byte) and the
// producer's own Headers. Consumers key their inbox on the returned ID.
//
// Headers holds the user properties whose names a producer may use (see
// herald.ValidateHeaderName: no Herald-*); where a name comes more than
// once, the last value wins.
//
// A PUBLISH Herald sent as a CloudEvent (Config.CloudEvents) is read back
// from its user properties or, when its Content Type is the JSON event
// format, from its payload (see package heraldce); Topic is then the
// heraldtopic extension. Where a property of a CloudEvent repeats, the
// first one counts.
func Parse(pub *paho.Publish) (herald.Message, error) {
	if pub == nil || pub.Properties == nil {
		return herald.Message{}, ErrNotHerald
	}
	if pub.Properties.User.Get(herald.HeaderID) == "" && isCloudEvent(pub.Properties) {
		return parseCloudEvent(pub)
	}
	var (
		m        herald.Message
		ev, av   string
		versions = map[string]*string{herald.HeaderEventVersion: &ev, herald.HeaderAggregateVersion: &av}
	)
	for _, up := range pub.Properties.User {
		dst := heraldField(&m, up.Key)
		if dst == nil {
			dst = versions[up.Key]
		}
		if dst != nil {
			*dst = up.Value
			continue
		}
		if herald.ValidateHeaderName(up.Key) != nil {
			continue
		}
		if m.Headers == nil {
			m.Headers = make(map[string]string, len(pub.Properties.User))
		}
		m.Headers[up.Key] = up.Value
	}
	if _, err := uuid.Parse(m.ID); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	var err error
	if m.EventVersion, m.AggregateVersion, err = herald.ParseVersions(ev, av); err != nil {
		return herald.Message{}, fmt.Errorf("heraldmqtt: event %s: %w", m.ID, err)
	}
	m.Payload = pub.Payload
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m, nil
}

// heraldField returns the field of m that the Herald-* property name
// carries, nil for any other name.
func heraldField(m *herald.Message, name string) *string {
	switch name {
	case herald.HeaderID:
		return &m.ID
	case herald.HeaderTopic:
		return &m.Topic
	case herald.HeaderKey:
		return &m.Key
	case herald.HeaderType:
		return &m.Type
	case herald.HeaderAggregateType:
		return &m.AggregateType
	case herald.HeaderAggregateID:
		return &m.AggregateID
	}
	return nil
}

// isCloudEvent reports whether a PUBLISH of these properties looks like a
// CloudEvent: a structured Content Type, or a specversion user property.
func isCloudEvent(props *paho.PublishProperties) bool {
	return heraldce.IsStructured(props.ContentType) || props.User.Get("specversion") != ""
}

func parseCloudEvent(pub *paho.Publish) (herald.Message, error) {
	var (
		m   herald.Message
		err error
	)
	hs := make([]heraldce.Header, 0, len(pub.Properties.User))
	if heraldce.IsStructured(pub.Properties.ContentType) {
		for _, up := range pub.Properties.User {
			if herald.ValidateHeaderName(up.Key) == nil {
				hs = append(hs, heraldce.Header{Name: up.Key, Value: up.Value})
			}
		}
		m, err = heraldce.ParseStructured(hs, pub.Payload)
	} else {
		for _, up := range pub.Properties.User {
			hs = append(hs, heraldce.Header{Name: up.Key, Value: up.Value})
		}
		m, err = heraldce.ParseBinary("", hs, pub.Properties.ContentType, pub.Payload)
	}
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldmqtt: %w", err)
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	return m, nil
}
