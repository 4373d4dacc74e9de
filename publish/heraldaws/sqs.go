package heraldaws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

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
	if c.QueueURL == nil {
		return nil, errors.New("heraldaws: SQSConfig.QueueURL is required (Fixed(url) for one queue)")
	}
	base, err := newPublisher("queue", c.QueueURL, c.MaxMessageBytes, c.MaxConcurrentRequests, c.Logger, c.CloudEvents, "SQSConfig")
	if err != nil {
		return nil, err
	}
	s := &SQSPublisher{client: client, p: base}
	s.p.log = s.p.log.With("component", "herald.sqs")
	s.p.send = s.send
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
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for j, m := range msgs {
		e := types.SendMessageBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(j)),
			MessageBody:       aws.String(m.body),
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
	out, err := s.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL), Entries: entries})
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

// Fixed returns a destination function (SQSConfig.QueueURL,
// SNSConfig.TopicARN) that sends every event to dest.
func Fixed(dest string) func(env *herald.Envelope) string {
	return func(*herald.Envelope) string { return dest }
}

// newPublisher checks and fills the settings the SQS and SNS publishers
// share; config names their Config type in errors.
func newPublisher(what string, dest func(*herald.Envelope) string, maxBytes, concurrency int, log *slog.Logger,
	ce *heraldce.Config, config string) (publisher, error) {
	if maxBytes == 0 {
		maxBytes = DefaultMaxMessageBytes
	}
	if concurrency == 0 {
		concurrency = DefaultMaxConcurrentRequests
	}
	if log == nil {
		log = slog.Default()
	}
	switch {
	case maxBytes < 0:
		return publisher{}, errors.New("heraldaws: " + config + ".MaxMessageBytes must not be negative")
	case concurrency < 0:
		return publisher{}, errors.New("heraldaws: " + config + ".MaxConcurrentRequests must not be negative")
	}
	if ce != nil {
		if err := ce.Validate("heraldaws: " + config + ".CloudEvents"); err != nil {
			return publisher{}, err
		}
		if ce.ModeOr(heraldce.Structured) != heraldce.Structured {
			return publisher{}, fmt.Errorf("heraldaws: %s.CloudEvents.Mode %q: SQS and SNS take CloudEvents in structured mode only "+
				"(no binding defines a binary mode for them, and their 10 message attributes cannot hold every attribute)", config, ce.Mode)
		}
		c := *ce
		ce = &c
	}
	return publisher{what: what, dest: dest, maxBytes: maxBytes, concurrency: concurrency, log: log, ce: ce}, nil
}
