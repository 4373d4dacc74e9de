package heraldaws

import (
	"context"
	"errors"
	"log/slog"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// SQSClient is the part of *sqs.Client that an SQSPublisher uses.
type SQSClient interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// SQSConfig configures an SQSPublisher.
type SQSConfig struct {
	// QueueURL returns the URL of the queue an event goes to, such as
	// https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo; Fixed
	// makes one for a single queue. A queue whose name ends in ".fifo" is
	// taken as a FIFO queue. An event for which it returns "" fails
	// permanently. Required.
	QueueURL func(env *herald.Envelope) string
	// MaxMessageBytes is the largest message Publish sends, counted as
	// SQS counts it (the body, base64 when the payload is not text, plus
	// the attributes); a larger one is reported with herald.Permanent
	// without being sent. It also bounds a batch request. Raise it up to
	// the queue's MaximumMessageSize (SQS allows 1 MiB). Defaults to
	// DefaultMaxMessageBytes (256 KiB).
	MaxMessageBytes int
	// MaxConcurrentRequests bounds the SendMessageBatch requests one
	// Publish has in flight. Defaults to DefaultMaxConcurrentRequests.
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

// SQSPublisher is a herald.Publisher to Amazon SQS. It lives as long as
// the client it was given; it holds nothing to close.
type SQSPublisher struct {
	client SQSClient
	p      publisher
}

var _ herald.Publisher = (*SQSPublisher)(nil)

// NewSQS returns a publisher over client (an *sqs.Client the caller
// configured: region, credentials, endpoint, retries). Errors name the
// SQSConfig field at fault.
func NewSQS(client SQSClient, cfg *SQSConfig) (*SQSPublisher, error) {
	if client == nil {
		return nil, errors.New("heraldaws: NewSQS: SQS client is nil")
	}
	var c SQSConfig
	if cfg != nil {
		c = *cfg
	}
	s := &SQSPublisher{client: client}
	var err error
	s.p, err = newPublisher(settings{
		service: "SQS", what: "queue", destField: "QueueURL", destHint: "Fixed(url) for one queue", send: s.send,
		dest: c.QueueURL, maxBytes: c.MaxMessageBytes, concurrency: c.MaxConcurrentRequests, log: c.Logger, ce: c.CloudEvents,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Publish sends the batch to SQS with SendMessageBatch (see the package
// documentation). It returns nil only when SQS accepted every event; a
// *herald.BatchError when some events failed; and a plain error when SQS
// answered for none, because it is unreachable, throttling or refusing
// the credentials, or ctx ended first.
func (s *SQSPublisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	return s.p.publish(ctx, batch)
}

func (s *SQSPublisher) send(ctx context.Context, queueURL string, msgs []*message) (answer, error) {
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL)}
	for _, e := range entries(msgs, sqsValue) {
		in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
			Id: e.id, MessageBody: e.body, MessageAttributes: e.attrs, MessageGroupId: e.group, MessageDeduplicationId: e.dedup,
		})
	}
	out, err := s.client.SendMessageBatch(ctx, in)
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

func sqsValue(dataType, str *string, bin []byte) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: dataType, StringValue: str, BinaryValue: bin}
}
