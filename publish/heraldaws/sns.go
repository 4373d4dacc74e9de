package heraldaws

import (
	"context"
	"errors"
	"log/slog"

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
	s := &SNSPublisher{client: client}
	var err error
	s.p, err = newPublisher(settings{
		service: "SNS", what: "topic", destField: "TopicARN", destHint: "Fixed(arn) for one topic", send: s.send,
		dest: c.TopicARN, maxBytes: c.MaxMessageBytes, concurrency: c.MaxConcurrentRequests, log: c.Logger, ce: c.CloudEvents,
	})
	if err != nil {
		return nil, err
	}
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
	in := &sns.PublishBatchInput{TopicArn: aws.String(topicARN)}
	for _, e := range entries(msgs, snsValue) {
		in.PublishBatchRequestEntries = append(in.PublishBatchRequestEntries, types.PublishBatchRequestEntry{
			Id: e.id, Message: e.body, MessageAttributes: e.attrs, MessageGroupId: e.group, MessageDeduplicationId: e.dedup,
		})
	}
	out, err := s.client.PublishBatch(ctx, in)
	if err != nil {
		return answer{}, err
	}
	var ans answer
	for _, ok := range out.Successful {
		ans.accept(ok.Id)
	}
	for _, f := range out.Failed {
		ans.refuse(f.Id, f.Code, f.Message, f.SenderFault)
	}
	return ans, nil
}

func snsValue(dataType, str *string, bin []byte) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: dataType, StringValue: str, BinaryValue: bin}
}
