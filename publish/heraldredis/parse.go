package heraldredis

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse for a stream entry without a valid id
// field: it was not added by a Herald relay.
var ErrNotHerald = errors.New("heraldredis: not a Herald event (no valid id field)")

// Parse turns a stream entry, as XREAD, XREADGROUP or XRANGE return it, back
// into the event a producer wrote: ID, Topic (without the publisher's
// StreamPrefix), Key, Type, AggregateType, AggregateID, EventVersion and
// AggregateVersion (a malformed version is an error, see
// herald.ParseVersions), Payload and the producer's Headers. Consumers key their inbox on the returned ID; the
// entry's own stream id (msg.ID) is Redis's, not the event's.
//
// An entry Herald added as a CloudEvent (Config.CloudEvents) is read back
// from its ce_* fields or, when its content-type field is the JSON event
// format, from its payload field (see package heraldce); Topic is then the
// heraldtopic extension.
func Parse(msg redis.XMessage) (herald.Message, error) {
	id, err := field(msg, FieldID)
	if err != nil {
		return herald.Message{}, err
	}
	if _, ok := msg.Values[FieldID]; !ok && isCloudEvent(msg) {
		return parseCloudEvent(msg)
	}
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	m := herald.Message{ID: id}
	for _, f := range [...]struct {
		name string
		dst  *string
	}{
		{FieldTopic, &m.Topic},
		{FieldKey, &m.Key},
		{FieldType, &m.Type},
		{FieldAggregateType, &m.AggregateType},
		{FieldAggregateID, &m.AggregateID},
	} {
		if *f.dst, err = field(msg, f.name); err != nil {
			return herald.Message{}, err
		}
	}
	if m.EventVersion, m.AggregateVersion, err = versions(msg); err != nil {
		return herald.Message{}, err
	}
	payload, err := field(msg, FieldPayload)
	if err != nil {
		return herald.Message{}, err
	}
	m.Payload = []byte(payload)
	headers, err := field(msg, FieldHeaders)
	if err != nil {
		return herald.Message{}, err
	}
	if headers != "" {
		if err := json.Unmarshal([]byte(headers), &m.Headers); err != nil {
			return herald.Message{}, fmt.Errorf("heraldredis: entry %s: field %q: %w", msg.ID, FieldHeaders, err)
		}
	}
	return m, nil
}

// versions reads the FieldEventVersion and FieldAggregateVersion fields
// (herald.ParseVersions: an absent event version is 1), each error naming
// the field.
func versions(msg redis.XMessage) (int, int64, error) {
	ev, err := field(msg, FieldEventVersion)
	if err != nil {
		return 0, 0, err
	}
	av, err := field(msg, FieldAggregateVersion)
	if err != nil {
		return 0, 0, err
	}
	event, _, err := herald.ParseVersions(ev, "")
	if err != nil {
		return 0, 0, fmt.Errorf("heraldredis: entry %s: field %q: %w", msg.ID, FieldEventVersion, err)
	}
	_, aggregate, err := herald.ParseVersions("", av)
	if err != nil {
		return 0, 0, fmt.Errorf("heraldredis: entry %s: field %q: %w", msg.ID, FieldAggregateVersion, err)
	}
	return event, aggregate, nil
}

// field returns the named field of an entry, "" when it is absent.
func field(msg redis.XMessage, name string) (string, error) {
	switch v := msg.Values[name].(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	default:
		return "", fmt.Errorf("heraldredis: entry %s: field %q is a %T, not a string", msg.ID, name, v)
	}
}

// isCloudEvent reports whether msg looks like a CloudEvent: a ce_id field
// or a structured content-type field.
func isCloudEvent(msg redis.XMessage) bool {
	if _, ok := msg.Values[FieldCEPrefix+"id"]; ok {
		return true
	}
	ct, err := field(msg, FieldContentType)
	return err == nil && heraldce.IsStructured(ct)
}

func parseCloudEvent(msg redis.XMessage) (herald.Message, error) {
	var (
		hs      []heraldce.Header
		headers map[string]string
	)
	for name := range msg.Values {
		if !strings.HasPrefix(name, FieldCEPrefix) {
			continue
		}
		v, err := field(msg, name)
		if err != nil {
			return herald.Message{}, err
		}
		hs = append(hs, heraldce.Header{Name: name, Value: v})
	}
	ct, err := field(msg, FieldContentType)
	if err != nil {
		return herald.Message{}, err
	}
	payload, err := field(msg, FieldPayload)
	if err != nil {
		return herald.Message{}, err
	}
	encoded, err := field(msg, FieldHeaders)
	if err != nil {
		return herald.Message{}, err
	}
	if encoded != "" {
		if err := json.Unmarshal([]byte(encoded), &headers); err != nil {
			return herald.Message{}, fmt.Errorf("heraldredis: entry %s: field %q: %w", msg.ID, FieldHeaders, err)
		}
	}
	for name, v := range headers {
		hs = append(hs, heraldce.Header{Name: name, Value: v})
	}
	var m herald.Message
	if heraldce.IsStructured(ct) {
		m, err = heraldce.ParseStructured(hs, []byte(payload))
	} else {
		m, err = heraldce.ParseBinary(FieldCEPrefix, hs, ct, []byte(payload))
	}
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldredis: entry %s: %w", msg.ID, err)
	}
	return m, nil
}
