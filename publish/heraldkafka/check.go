package heraldkafka

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald/heraldspec"
)

var _ heraldspec.TargetChecker = (*Publisher)(nil)

// CheckTarget reports whether the Kafka topic the events of topic go to
// (the TopicPrefix and the topic) exists, by a metadata request that asks
// the brokers not to create it. A missing topic is an error: the relay's
// events to it fail until it exists, or until brokers that create topics
// on first use (auto.create.topics.enable) make it. A route's pattern
// names no single Kafka topic, and the topics no route names ("") are not
// known ahead: neither is checked.
func (p *Publisher) CheckTarget(ctx context.Context, topic string) (heraldspec.Finding, error) {
	switch {
	case topic == "":
		return heraldspec.Finding{Severity: heraldspec.SeverityOK,
			Message: "not checked: each topic must exist (or be created on first use), and these are not known ahead"}, nil
	case strings.ContainsAny(topic, "*>"):
		return heraldspec.Finding{Severity: heraldspec.SeverityOK,
			Message: "not checked: a pattern names no single Kafka topic"}, nil
	}
	name := p.prefix + topic
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(name)
	req.Topics = append(req.Topics, t)
	req.AllowAutoTopicCreation = false
	resp, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return heraldspec.Finding{}, fmt.Errorf("heraldkafka: reading the metadata of topic %q: %w", name, err)
	}
	if len(resp.Topics) != 1 {
		return heraldspec.Finding{}, fmt.Errorf("heraldkafka: reading the metadata of topic %q: the broker answered for %d topics", name, len(resp.Topics))
	}
	rt := resp.Topics[0]
	switch err := kerr.ErrorForCode(rt.ErrorCode); {
	case err == nil:
		return heraldspec.Finding{Severity: heraldspec.SeverityOK,
			Message: fmt.Sprintf("Kafka topic %s exists (%d partitions)", name, len(rt.Partitions))}, nil
	case errors.Is(err, kerr.UnknownTopicOrPartition):
		return heraldspec.Finding{Severity: heraldspec.SeverityError,
			Message: fmt.Sprintf("Kafka topic %s does not exist: its events fail until it does, unless the brokers create topics on first use", name),
			Fix:     fmt.Sprintf("kafka-topics.sh --create --topic %s --bootstrap-server BROKER (with the partitions and replication its consumers need)", name)}, nil
	default:
		return heraldspec.Finding{}, fmt.Errorf("heraldkafka: reading the metadata of topic %q: %w", name, err)
	}
}
