package heraldkafka

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrNotHerald is returned by Parse for a record without a valid Herald-Id
// header: it was not published by a Herald relay.
var ErrNotHerald = errors.New("heraldkafka: not a Herald event (no valid Herald-Id header)")

// Parse turns a consumed record back into the event a producer wrote: ID,
// Topic (the record's topic, less any TopicPrefix the publisher used: pass
// the prefix to ParseWithPrefix), Key, Type, AggregateType, AggregateID,
// EventVersion and AggregateVersion (see herald.ParseVersions; a malformed
// one is an error), Payload and the producer's own Headers (without
// Herald-*). Consumers key
// their inbox on the returned ID. Where a header repeats, the first one
// counts. A record Herald sent as a CloudEvent (Config.CloudEvents) is read
// back with heraldce.ParseKafka, its topic from the heraldtopic extension.
func Parse(r *kgo.Record) (herald.Message, error) {
	if r == nil {
		return herald.Message{}, errors.New("heraldkafka: Parse: nil record")
	}
	return parse(r, "")
}

// ParseWithPrefix is Parse for a publisher configured with TopicPrefix: the
// prefix is removed from the topic.
func ParseWithPrefix(r *kgo.Record, prefix string) (herald.Message, error) {
	if r == nil {
		return herald.Message{}, errors.New("heraldkafka: ParseWithPrefix: nil record")
	}
	return parse(r, prefix)
}

func parse(r *kgo.Record, prefix string) (herald.Message, error) {
	var (
		fields = map[string]string{}
		own    map[string]string
	)
	for _, h := range r.Headers {
		if len(h.Key) >= 7 && strings.EqualFold(h.Key[:7], "herald-") {
			if _, seen := fields[h.Key]; !seen {
				fields[h.Key] = string(h.Value)
			}
			continue
		}
		if own == nil {
			own = make(map[string]string, len(r.Headers))
		}
		if _, seen := own[h.Key]; !seen {
			own[h.Key] = string(h.Value)
		}
	}
	topic := r.Topic
	if prefix != "" {
		var ok bool
		if topic, ok = strings.CutPrefix(r.Topic, prefix); !ok || topic == "" {
			return herald.Message{}, fmt.Errorf("heraldkafka: topic %q lacks the prefix %q", r.Topic, prefix)
		}
	}
	id, ok := fields[herald.HeaderID]
	if !ok && isCloudEvent(r) {
		return parseCloudEvent(r, topic)
	}
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	ev, av, err := herald.ParseVersions(fields[herald.HeaderEventVersion], fields[herald.HeaderAggregateVersion])
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldkafka: event %s: %w", id, err)
	}
	return herald.Message{
		ID:               id,
		Topic:            topic,
		Key:              fields[herald.HeaderKey],
		Type:             fields[herald.HeaderType],
		AggregateType:    fields[herald.HeaderAggregateType],
		AggregateID:      fields[herald.HeaderAggregateID],
		EventVersion:     ev,
		AggregateVersion: av,
		Payload:          r.Value,
		Headers:          own,
	}, nil
}

// isCloudEvent reports whether r looks like a CloudEvent: a ce_id header or
// a structured content type.
func isCloudEvent(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if strings.EqualFold(h.Key, "ce_id") ||
			strings.EqualFold(h.Key, "content-type") && heraldce.IsStructured(string(h.Value)) {
			return true
		}
	}
	return false
}

func parseCloudEvent(r *kgo.Record, topic string) (herald.Message, error) {
	hs := make([]heraldce.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = heraldce.Header{Name: h.Key, Value: string(h.Value)}
	}
	msg, err := heraldce.ParseKafka(hs, r.Value)
	if errors.Is(err, heraldce.ErrNotHerald) {
		return herald.Message{}, ErrNotHerald
	}
	if err != nil {
		return herald.Message{}, fmt.Errorf("heraldkafka: %w", err)
	}
	if msg.Topic == "" {
		msg.Topic = topic
	}
	return msg, nil
}
