package heraldaws

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

var (
	_ heraldspec.TargetChecker = (*SQSPublisher)(nil)
	_ heraldspec.TargetChecker = (*SNSPublisher)(nil)
)

// sqsAttributes and snsAttributes are what CheckTarget asks of a client
// beyond SQSClient and SNSClient; *sqs.Client and *sns.Client have them.
type (
	sqsAttributes interface {
		GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	}
	snsAttributes interface {
		GetTopicAttributes(ctx context.Context, in *sns.GetTopicAttributesInput, opts ...func(*sns.Options)) (*sns.GetTopicAttributesOutput, error)
	}
)

// CheckTarget reports whether the queue the events of topic go to
// (SQSConfig.QueueURL) exists, with sqs:GetQueueAttributes. A missing
// queue is an error. A route's pattern, or the topics no route names (""),
// are checked when QueueURL sends every topic to one queue (Fixed).
func (s *SQSPublisher) CheckTarget(ctx context.Context, topic string) (heraldspec.Finding, error) {
	client, ok := s.client.(sqsAttributes)
	if !ok {
		return notChecked("the SQS client cannot read a queue's attributes"), nil
	}
	url, ok := s.p.target(topic)
	if !ok {
		return notChecked("SQSConfig.QueueURL names no single queue for it"), nil
	}
	_, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url)})
	switch {
	case err == nil:
		return heraldspec.Finding{Severity: heraldspec.SeverityOK, Message: fmt.Sprintf("SQS queue %s exists", url)}, nil
	case apiCode(err, "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"):
		name := url[strings.LastIndex(url, "/")+1:]
		return heraldspec.Finding{Severity: heraldspec.SeverityError,
			Message: fmt.Sprintf("SQS queue %s does not exist: its events fail until it does", url),
			Fix:     fmt.Sprintf("aws sqs create-queue --queue-name %s (with the attributes its consumers need)", name)}, nil
	}
	return heraldspec.Finding{}, fmt.Errorf("heraldaws: reading the attributes of queue %s: %w", url, err)
}

// CheckTarget reports whether the topic the events of topic go to
// (SNSConfig.TopicARN) exists, with sns:GetTopicAttributes. A missing
// topic is an error. A route's pattern, or the topics no route names
// (""), are checked when TopicARN sends every topic to one SNS topic
// (Fixed).
func (s *SNSPublisher) CheckTarget(ctx context.Context, topic string) (heraldspec.Finding, error) {
	client, ok := s.client.(snsAttributes)
	if !ok {
		return notChecked("the SNS client cannot read a topic's attributes"), nil
	}
	arn, ok := s.p.target(topic)
	if !ok {
		return notChecked("SNSConfig.TopicARN names no single SNS topic for it"), nil
	}
	_, err := client.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(arn)})
	switch {
	case err == nil:
		return heraldspec.Finding{Severity: heraldspec.SeverityOK, Message: fmt.Sprintf("SNS topic %s exists", arn)}, nil
	case apiCode(err, "NotFound", "NotFoundException"):
		name := arn[strings.LastIndex(arn, ":")+1:]
		return heraldspec.Finding{Severity: heraldspec.SeverityError,
			Message: fmt.Sprintf("SNS topic %s does not exist: its events fail until it does", arn),
			Fix:     fmt.Sprintf("aws sns create-topic --name %s, and subscribe its consumers", name)}, nil
	}
	return heraldspec.Finding{}, fmt.Errorf("heraldaws: reading the attributes of topic %s: %w", arn, err)
}

// target is the queue URL or topic ARN the events of topic go to. A
// pattern or "" has one only when every topic goes to the same place,
// which two made-up topics tell.
func (p *publisher) target(topic string) (string, bool) {
	dest := func(topic string) string { return p.dest(&herald.Envelope{Message: herald.Message{Topic: topic}}) }
	if topic == "" || strings.ContainsAny(topic, "*>") {
		a, b := dest("herald.doctor.a"), dest("herald.doctor.b")
		return a, a != "" && a == b
	}
	d := dest(topic)
	return d, d != ""
}

func notChecked(why string) heraldspec.Finding {
	return heraldspec.Finding{Severity: heraldspec.SeverityOK, Message: "not checked: " + why}
}

// apiCode reports whether err is an AWS error of one of codes.
func apiCode(err error, codes ...string) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	for _, c := range codes {
		if api.ErrorCode() == c {
			return true
		}
	}
	return false
}
