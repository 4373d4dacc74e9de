package heraldpubsub

import (
	"context"
	"fmt"
	"strings"

	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald/heraldspec"
)

var _ heraldspec.TargetChecker = (*Publisher)(nil)

// CheckTarget reports whether the Pub/Sub topic the events of topic go to
// (TopicPrefix and the topic) exists in the project, with GetTopic
// (pubsub.topics.get), which creates nothing. A missing topic is an
// error. A route's pattern names no single topic, and the topics no route
// names ("") are not known ahead: neither is checked.
func (p *Publisher) CheckTarget(ctx context.Context, topic string) (heraldspec.Finding, error) {
	switch {
	case topic == "":
		return heraldspec.Finding{Severity: heraldspec.SeverityOK,
			Message: "not checked: each topic must exist in the project, and these are not known ahead"}, nil
	case strings.ContainsAny(topic, "*>"):
		return heraldspec.Finding{Severity: heraldspec.SeverityOK, Message: "not checked: a pattern names no single Pub/Sub topic"}, nil
	}
	id := p.prefix + topic
	if reason := checkTopicID(id); reason != "" {
		return heraldspec.Finding{Severity: heraldspec.SeverityError,
			Message: fmt.Sprintf("topic ID %q %s: its events are refused", id, reason),
			Fix:     "route the topic elsewhere, or change the TopicPrefix"}, nil
	}
	name := fmt.Sprintf("projects/%s/topics/%s", p.project, id)
	_, err := p.client.TopicAdminClient.GetTopic(ctx, &pb.GetTopicRequest{Topic: name})
	switch status.Code(err) {
	case codes.OK:
		return heraldspec.Finding{Severity: heraldspec.SeverityOK, Message: fmt.Sprintf("Pub/Sub topic %s exists", name)}, nil
	case codes.NotFound:
		return heraldspec.Finding{Severity: heraldspec.SeverityError,
			Message: fmt.Sprintf("Pub/Sub topic %s does not exist: its events fail until it does", name),
			Fix:     fmt.Sprintf("gcloud pubsub topics create %s --project %s, and subscribe its consumers", id, p.project)}, nil
	}
	return heraldspec.Finding{}, fmt.Errorf("heraldpubsub: asking Pub/Sub for topic %s: %w", name, err)
}
