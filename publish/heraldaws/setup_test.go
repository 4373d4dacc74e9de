package heraldaws_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/publishertest"
)

func TestMain(m *testing.M) {
	if os.Getenv(claimChildEnv) != "" {
		runClaimChild()
	}
	testenv.Main(m)
}

// bundle is one test's AWS emulator and clients of it.
type bundle struct {
	sqs *sqs.Client
	sns *sns.Client
	// topics maps a Herald topic to its queue URL (SQS) or topic ARN
	// (SNS), and reads maps it to the queue Read drains. The suite's cases
	// run in parallel.
	mu           sync.Mutex
	dests, reads map[string]string
}

var names atomic.Int64

// setup starts moto_server for the test and returns clients of it.
func setup(t *testing.T) *bundle {
	t.Helper()
	moto := testenv.Moto(t)
	cfg := awsConfig(t, moto.URL)
	return &bundle{
		sqs:   sqs.NewFromConfig(cfg),
		sns:   sns.NewFromConfig(cfg),
		dests: map[string]string{}, reads: map[string]string{},
	}
}

// awsConfig returns an SDK configuration for the endpoint, with static
// credentials and an HTTP client whose idle connections are closed when
// the test ends (goleak would report their goroutines).
func awsConfig(t *testing.T, endpoint string) aws.Config {
	transport := &http.Transport{}
	t.Cleanup(transport.CloseIdleConnections)
	return aws.Config{
		Region:       "eu-west-1",
		Credentials:  credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", ""),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   &http.Client{Transport: transport},
	}
}

// queue creates a queue (a FIFO one when name ends in ".fifo") with the
// given attributes and returns its URL.
func (b *bundle) queue(t *testing.T, name string, attrs map[string]string) string {
	t.Helper()
	all := map[string]string{}
	if strings.HasSuffix(name, ".fifo") {
		all["FifoQueue"] = "true"
	}
	for k, v := range attrs {
		all[k] = v
	}
	out, err := b.sqs.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: all})
	require.NoError(t, err, "creating queue %s", name)
	return aws.ToString(out.QueueUrl)
}

// topic creates an SNS topic (FIFO when name ends in ".fifo") and a queue
// of the same kind subscribed to it, with raw message delivery or not,
// and returns the topic's ARN and the queue's URL.
func (b *bundle) topic(t *testing.T, name string, raw bool) (string, string) {
	t.Helper()
	attrs := map[string]string{}
	if strings.HasSuffix(name, ".fifo") {
		attrs["FifoTopic"] = "true"
	}
	out, err := b.sns.CreateTopic(t.Context(), &sns.CreateTopicInput{Name: aws.String(name), Attributes: attrs})
	require.NoError(t, err, "creating topic %s", name)
	q := b.queue(t, "sub-"+name, nil)
	qa, err := b.sqs.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	require.NoError(t, err)
	_, err = b.sns.Subscribe(t.Context(), &sns.SubscribeInput{
		TopicArn: out.TopicArn, Protocol: aws.String("sqs"), Endpoint: aws.String(qa.Attributes["QueueArn"]),
		Attributes: map[string]string{"RawMessageDelivery": fmt.Sprint(raw)},
	})
	require.NoError(t, err, "subscribing a queue to topic %s", name)
	return aws.ToString(out.TopicArn), q
}

// freshName returns a queue or topic name unique in the test binary.
func freshName(fifo bool) string {
	n := fmt.Sprintf("herald-%d", names.Add(1))
	if fifo {
		n += ".fifo"
	}
	return n
}

// addTopic creates a Herald topic whose events go to a fresh queue, or to
// a fresh SNS topic with a queue subscribed, and returns its name.
func (b *bundle) addTopic(t *testing.T, viaSNS, fifo bool) string {
	t.Helper()
	name := freshName(fifo)
	var dest, read string
	if viaSNS {
		dest, read = b.topic(t, name, true)
	} else {
		dest = b.queue(t, name, nil)
		read = dest
	}
	topic := "conformance." + strings.TrimSuffix(name, ".fifo")
	b.mu.Lock()
	b.dests[topic], b.reads[topic] = dest, read
	b.mu.Unlock()
	return topic
}

// dest is the QueueURL or TopicARN function of the bundle's topics.
func (b *bundle) dest(env *herald.Envelope) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dests[env.Topic]
}

// readTopic is Harness.Read for a topic made by addTopic.
func (b *bundle) readTopic(t *testing.T, topic string, n int) []publishertest.Received {
	t.Helper()
	b.mu.Lock()
	q, ok := b.reads[topic]
	b.mu.Unlock()
	require.True(t, ok, "unknown topic %s", topic)
	var got []publishertest.Received
	for _, msg := range b.receive(t, q, n) {
		m, err := heraldaws.Parse(msg)
		require.NoError(t, err)
		got = append(got, publishertest.ReceivedOf(m))
	}
	return got
}

// receive reads and deletes messages of the queue until n arrived, then
// takes what else is there at once; it fails the test if fewer than n
// arrive within 30s. Messages come in the order SQS hands them out. A
// FIFO queue hands one group's messages out 10 at a time, each batch
// deleted before the next, so 200 messages of one key are 40 calls to
// moto: on a loaded machine under -race that took more than 10s.
func (b *bundle) receive(t *testing.T, queueURL string, n int) []types.Message {
	t.Helper()
	var got []types.Message
	const bound = 30 * time.Second
	deadline := time.Now().Add(bound)
	for {
		wait := int32(1)
		if len(got) >= n {
			wait = 0 // only the stragglers already there
		}
		out, err := b.sqs.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: wait, VisibilityTimeout: 60,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		require.NoError(t, err, "receiving from %s", queueURL)
		b.deleteAll(t, queueURL, out.Messages)
		got = append(got, out.Messages...)
		switch {
		case len(got) >= n && len(out.Messages) == 0:
			return got
		case len(got) < n && time.Now().After(deadline):
			require.Failf(t, "messages missing", "%d of %d messages arrived in %s within %s", len(got), n, queueURL, bound)
		}
	}
}

// deleteAll deletes received messages, so that a FIFO queue hands out the
// next ones of their groups.
func (b *bundle) deleteAll(t *testing.T, queueURL string, msgs []types.Message) {
	t.Helper()
	if len(msgs) == 0 {
		return
	}
	entries := make([]types.DeleteMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle}
	}
	out, err := b.sqs.DeleteMessageBatch(context.WithoutCancel(t.Context()), &sqs.DeleteMessageBatchInput{
		QueueUrl: aws.String(queueURL), Entries: entries,
	})
	require.NoError(t, err)
	require.Empty(t, out.Failed, "deleting received messages")
}

// sqsPublisher returns a publisher to the bundle's queues.
func (b *bundle) sqsPublisher(t *testing.T, cfg *heraldaws.SQSConfig) *heraldaws.SQSPublisher {
	t.Helper()
	c := heraldaws.SQSConfig{QueueURL: b.dest}
	if cfg != nil {
		c = *cfg
		if c.QueueURL == nil {
			c.QueueURL = b.dest
		}
	}
	p, err := heraldaws.NewSQS(b.sqs, &c)
	require.NoError(t, err)
	return p
}

// snsPublisher returns a publisher to the bundle's topics.
func (b *bundle) snsPublisher(t *testing.T, cfg *heraldaws.SNSConfig) *heraldaws.SNSPublisher {
	t.Helper()
	c := heraldaws.SNSConfig{TopicARN: b.dest}
	if cfg != nil {
		c = *cfg
		if c.TopicARN == nil {
			c.TopicARN = b.dest
		}
	}
	p, err := heraldaws.NewSNS(b.sns, &c)
	require.NoError(t, err)
	return p
}

// unreachable returns SQS and SNS clients of a closed port.
func unreachable(t *testing.T) (*sqs.Client, *sns.Client) {
	cfg := awsConfig(t, "http://127.0.0.1:1")
	return sqs.NewFromConfig(cfg), sns.NewFromConfig(cfg)
}
