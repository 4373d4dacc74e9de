package heraldaws

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sns/types"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// SNSClient is the part of *sns.Client that an SNSPublisher uses.
type SNSClient interface {
	PublishBatch(ctx context.Context, in *sns.PublishBatchInput, opts ...func(*sns.Options)) (*sns.PublishBatchOutput, error)
}

// SNSConfig configures an SNSPublisher.
type SNSConfig struct {
	// TopicARN returns the ARN of the topic an event goes to, such as
	// arn:aws:sns:eu-west-1:123456789012:orders.fifo; Fixed makes one for
	// a single topic. A topic whose name ends in ".fifo" is taken as a FIFO
	// topic. An event for which it returns "" fails permanently. Required.
	TopicARN func(env *herald.Envelope) string
	// MaxMessageBytes is the largest message Publish sends, counted as SNS
	// counts it (the body, base64 when the payload is not text, plus the
	// attributes); a larger one is reported with herald.Permanent without
	// being sent. It also bounds a batch request. Defaults to
	// DefaultMaxMessageBytes (256 KiB, SNS's limit).
	MaxMessageBytes int
	// MaxConcurrentRequests bounds the PublishBatch requests one Publish
	// has in flight. Defaults to DefaultMaxConcurrentRequests.
	MaxConcurrentRequests int
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent in structured mode: the
	// body is the event in the JSON event format, and the attribute
	// content-type (AttrContentType) says heraldce.StructuredContentType;
	// see the package documentation. Mode must be empty or
	// heraldce.Structured. Defaults to nil: off.
	CloudEvents *heraldce.Config
}

// SNSPublisher is a herald.Publisher to Amazon SNS. It lives as long as
// the client it was given; it holds nothing to close.
type SNSPublisher struct {
	client SNSClient
	p      publisher
}

var _ herald.Publisher = (*SNSPublisher)(nil)

// NewSNS returns a publisher over client (an *sns.Client the caller
// configured: region, credentials, endpoint, retries). Errors name the
// SNSConfig field at fault.
func NewSNS(client SNSClient, cfg *SNSConfig) (*SNSPublisher, error) {
	if client == nil {
		return nil, errors.New("heraldaws: NewSNS: SNS client is nil")
	}
	var c SNSConfig
	if cfg != nil {
		c = *cfg
	}
	if c.TopicARN == nil {
		return nil, errors.New("heraldaws: SNSConfig.TopicARN is required (Fixed(arn) for one topic)")
	}
	base, err := newPublisher("topic", c.TopicARN, c.MaxMessageBytes, c.MaxConcurrentRequests, c.Logger, c.CloudEvents, "SNSConfig")
	if err != nil {
		return nil, err
	}
	s := &SNSPublisher{client: client, p: base}
	s.p.log = s.p.log.With("component", "herald.sns")
	s.p.send = s.send
	return s, nil
}

// Publish sends the batch to SNS with PublishBatch (see the package
// documentation). It returns nil only when SNS accepted every event; a
// *herald.BatchError when some events failed; and a plain error when SNS
// answered for none, because it is unreachable, throttling or refusing
// the credentials, or ctx ended first.
func (s *SNSPublisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	return s.p.publish(ctx, batch)
}

func (s *SNSPublisher) send(ctx context.Context, topicARN string, msgs []*message) (answer, error) {
	entries := make([]types.PublishBatchRequestEntry, len(msgs))
	for j, m := range msgs {
		e := types.PublishBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(j)),
			Message:           aws.String(m.body),
			MessageAttributes: make(map[string]types.MessageAttributeValue, len(m.attrs)),
		}
		for _, a := range m.attrs {
			v := types.MessageAttributeValue{DataType: aws.String(a.dataType())}
			if a.binary {
				v.BinaryValue = []byte(a.value)
			} else {
				v.StringValue = aws.String(a.value)
			}
			e.MessageAttributes[a.name] = v
		}
		if m.group != "" {
			e.MessageGroupId, e.MessageDeduplicationId = aws.String(m.group), aws.String(m.dedup)
		}
		entries[j] = e
	}
	out, err := s.client.PublishBatch(ctx, &sns.PublishBatchInput{TopicArn: aws.String(topicARN), PublishBatchRequestEntries: entries})
	if err != nil {
		return answer{}, err
	}
	var ans answer
	for _, ok := range out.Successful {
		ans.accepted = append(ans.accepted, aws.ToString(ok.Id))
	}
	for _, f := range out.Failed {
		ans.refused = append(ans.refused, refusal{
			id: aws.ToString(f.Id), code: aws.ToString(f.Code), msg: aws.ToString(f.Message), senderFault: f.SenderFault,
		})
	}
	return ans, nil
}
