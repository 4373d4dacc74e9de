package heraldaws_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	snstypes "github.com/aws/aws-sdk-go-v2/service/sns/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

// envelopes builds a batch as a relay hands it over: keyed events ordered.
func envelopes(t *testing.T, msgs ...herald.Message) []herald.Envelope {
	t.Helper()
	prepared, err := herald.Prepare(msgs, 1<<20)
	require.NoError(t, err)
	envs := make([]herald.Envelope, len(prepared))
	for i, m := range prepared {
		envs[i] = herald.Envelope{Message: m, Seq: int64(i + 1), Attempt: 1, CreatedAt: time.Now(), Ordered: m.Key != ""}
	}
	return envs
}

func publish(t *testing.T, p herald.Publisher, envs []herald.Envelope) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return p.Publish(ctx, envs)
}

// recordingSQS passes requests to a real client and records them.
type recordingSQS struct {
	next heraldaws.SQSClient
	mu   sync.Mutex
	reqs []*sqs.SendMessageBatchInput
}

func (r *recordingSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, in)
	r.mu.Unlock()
	return r.next.SendMessageBatch(ctx, in, opts...)
}

// Requests hold at most 10 entries and MaxMessageBytes in all, and every
// event arrives once: many small events, then events of which only two
// fit in a request.
func TestBatchRequestsKeepToTenEntriesAndTheSizeLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue(t, freshName(false), nil)
	rec := &recordingSQS{next: b.sqs}
	const limit = 64 << 10
	p, err := heraldaws.NewSQS(rec, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(q), MaxMessageBytes: limit})
	require.NoError(t, err)

	var msgs []herald.Message
	for i := range 45 {
		msgs = append(msgs, herald.Message{Topic: "t", Key: fmt.Sprint("k", i), Payload: []byte("small")})
	}
	for i := range 7 {
		msgs = append(msgs, herald.Message{Topic: "t", Key: fmt.Sprint("big", i), Payload: bytes.Repeat([]byte("b"), 25<<10)})
	}
	envs := envelopes(t, msgs...)
	require.NoError(t, publish(t, p, envs))

	// Four requests of ten small events; the fifth takes the last five and
	// two big ones; then two, two and one big.
	require.Len(t, rec.reqs, 8)
	for _, req := range rec.reqs {
		require.LessOrEqual(t, len(req.Entries), 10)
		size := 0
		for _, e := range req.Entries {
			size += len(aws.ToString(e.MessageBody))
			for name, v := range e.MessageAttributes {
				size += len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
			}
		}
		require.LessOrEqual(t, size, limit, "a request's messages in all")
	}
	got := b.receive(t, q, len(envs))
	require.Len(t, got, len(envs), "every event arrives once")
}

// SQS refuses a whole SendMessageBatch over one message longer than the
// queue's MaximumMessageSize: the messages of that request are sent again
// one by one, so that only that event fails (permanently), its key's later
// events are held back, and the other events arrive.
func TestRequestRefusedAsAWholeFailsOnlyTheMessageAtFault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue(t, freshName(false), map[string]string{"MaximumMessageSize": "1024"})
	p, err := heraldaws.NewSQS(b.sqs, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(q)})
	require.NoError(t, err)
	envs := envelopes(t,
		herald.Message{Topic: "t", Key: "a", Payload: []byte("a1")},
		herald.Message{Topic: "t", Key: "b", Payload: bytes.Repeat([]byte("x"), 2000)}, // over the queue's limit
		herald.Message{Topic: "t", Key: "c", Payload: []byte("c1")},
		herald.Message{Topic: "t", Key: "b", Payload: []byte("b2")},
		herald.Message{Topic: "t", Key: "a", Payload: []byte("a2")},
	)
	err = publish(t, p, envs)
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, len(envs))
	require.True(t, herald.IsPermanent(be.Errs[1]), "the message SQS finds too long: %v", be.Errs[1])
	require.ErrorContains(t, be.Errs[1], "InvalidParameterValue")
	require.ErrorIs(t, be.Errs[3], herald.ErrHeldBack, "key b after its failed event")
	for _, i := range []int{0, 2, 4} {
		require.NoError(t, be.Errs[i], "event %d", i)
	}
	var ids []string
	for _, m := range b.receive(t, q, 3) {
		got, err := heraldaws.Parse(m)
		require.NoError(t, err)
		ids = append(ids, got.ID)
	}
	require.ElementsMatch(t, []string{envs[0].ID, envs[2].ID, envs[4].ID}, ids)
}

// In a FIFO queue, the message group is the event's key (a fixed group for
// events without one) and the deduplication id is the event id.
func TestFIFOGroupIsTheKeyAndDeduplicationIDTheEventID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue(t, freshName(true), nil)
	p, err := heraldaws.NewSQS(b.sqs, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed(q)})
	require.NoError(t, err)
	long := strings.Repeat("k", 200)
	envs := envelopes(t,
		herald.Message{Topic: "t", Key: "order-42", Payload: []byte("1")},
		herald.Message{Topic: "t", Payload: []byte("2")},
		herald.Message{Topic: "t", Key: long, Payload: []byte("3")},
	)
	require.NoError(t, publish(t, p, envs))
	want := map[string]string{envs[0].ID: "order-42", envs[1].ID: "herald-unkeyed", envs[2].ID: heraldaws.GroupID(long)}
	got := b.receive(t, q, len(envs))
	require.Len(t, got, len(envs))
	for _, m := range got {
		ev, err := heraldaws.Parse(m)
		require.NoError(t, err)
		require.Equal(t, want[ev.ID], m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)], "event %s", ev.ID)
		require.Equal(t, ev.ID, m.Attributes[string(types.MessageSystemAttributeNameMessageDeduplicationId)])
	}
}

// Without raw message delivery, SNS wraps the message in its JSON
// notification, which Parse reads; with it, the attributes are the
// message's own.
func TestSNSToSQSWithAndWithoutRawDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, raw := range []bool{false, true} {
		arn, q := b.topic(t, freshName(false), raw)
		p, err := heraldaws.NewSNS(b.sns, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed(arn)})
		require.NoError(t, err)
		envs := envelopes(t, herald.Message{
			Topic: "orders", Key: "order-42", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			Payload: []byte{0, 1, 2, 0xff}, Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-ab-cd-01"},
		})
		require.NoError(t, publish(t, p, envs))
		got := b.receive(t, q, 1)
		require.Len(t, got, 1)
		_, hasID := got[0].MessageAttributes[herald.HeaderID]
		require.Equal(t, raw, hasID, "raw delivery %v: attributes on the SQS message", raw)
		require.Equal(t, !raw, strings.Contains(aws.ToString(got[0].Body), `"Type"`), "raw delivery %v: an SNS notification as body", raw)
		ev, err := heraldaws.Parse(got[0])
		require.NoError(t, err)
		require.Equal(t, envs[0].Message, ev)
	}
}

// fakeSQS answers SendMessageBatch with a function field.
type fakeSQS struct {
	mu    sync.Mutex
	calls int
	send  func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error)
}

func (f *fakeSQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.send(in)
}

// entryKey returns the Herald-Key attribute of an entry.
func entryKey(e types.SendMessageBatchRequestEntry) string {
	return aws.ToString(e.MessageAttributes[herald.HeaderKey].StringValue)
}

// Entries SQS refuses in a successful SendMessageBatch are reported per
// event by their codes (the SDK's BatchResultErrorEntry): content errors
// are permanent, throttling and AWS's own faults spend no attempt, the
// rest are retried; an entry SQS does not mention is not taken as sent;
// the later events of a refused key are held back.
func TestEntryRefusalsMapToEventOutcomes(t *testing.T) {
	t.Parallel()
	refuse := map[string]types.BatchResultErrorEntry{ // by key
		"content":   {Code: aws.String("InvalidMessageContents"), SenderFault: true, Message: aws.String("bad characters")},
		"throttled": {Code: aws.String("RequestThrottled"), SenderFault: true},
		"kms":       {Code: aws.String("KmsThrottled"), SenderFault: true},
		"internal":  {Code: aws.String("InternalError"), SenderFault: false},
		"disabled":  {Code: aws.String("KmsDisabled"), SenderFault: true},
	}
	fake := &fakeSQS{send: func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		out := &sqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			switch r, ok := refuse[entryKey(e)]; {
			case ok:
				r.Id = e.Id
				out.Failed = append(out.Failed, r)
			case entryKey(e) == "forgotten":
			default:
				out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
			}
		}
		return out, nil
	}}
	p, err := heraldaws.NewSQS(fake, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("https://sqs.eu-west-1.amazonaws.com/1/q")})
	require.NoError(t, err)
	keys := []string{"ok", "content", "throttled", "kms", "internal", "disabled", "forgotten", "content", "ok"}
	var msgs []herald.Message
	for _, k := range keys {
		msgs = append(msgs, herald.Message{Topic: "t", Key: k, Payload: []byte(k)})
	}
	err = publish(t, p, envelopes(t, msgs...))
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	errs := be.Errs
	require.NoError(t, errs[0])
	require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
	require.ErrorContains(t, errs[1], "InvalidMessageContents: bad characters")
	for _, i := range []int{2, 3, 4} {
		require.Truef(t, herald.IsUnavailable(errs[i]), "key %s: %v", keys[i], errs[i])
	}
	require.Error(t, errs[5])
	require.False(t, herald.IsPermanent(errs[5]) || herald.IsUnavailable(errs[5]), "a disabled KMS key is retried: %v", errs[5])
	require.ErrorIs(t, errs[6], herald.ErrNoAnswer, "an entry SQS did not mention")
	require.ErrorIs(t, errs[7], herald.ErrHeldBack)
	require.NoError(t, errs[8])
	require.Equal(t, 2, fake.calls, "two rounds: key ok and key content have a second event")
}

// A request that fails as a whole fails its events as its error code says;
// when AWS answered for no event, Publish returns a plain error (an
// outage), wrapping herald.Unavailable where AWS throttled.
func TestWholeRequestErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		err             error
		outage          bool // a plain error: no event answered
		permanent, unav bool
	}{
		{"SQSRequestThrottled", &types.RequestThrottled{Message: aws.String("slow down")}, true, false, true},
		{"SQSKmsThrottled", &types.KmsThrottled{}, true, false, true},
		{"ThrottlingException", &smithy.GenericAPIError{Code: "ThrottlingException", Fault: smithy.FaultClient}, true, false, true},
		{"SNSThrottled", &snstypes.ThrottledException{}, true, false, true},
		{"SNSKMSThrottling", &snstypes.KMSThrottlingException{}, true, false, true},
		{"RetryQuotaExhausted", ratelimit.QuotaExceededError{Available: 0, Requested: 5}, true, false, true},
		{"ServerFault", &smithy.GenericAPIError{Code: "InternalFailure", Fault: smithy.FaultServer}, true, false, true},
		{"AccessDenied", &smithy.GenericAPIError{Code: "AccessDenied", Fault: smithy.FaultClient}, true, false, true},
		{"NoAnswer", errors.New("dial tcp 127.0.0.1:1: connection refused"), true, false, true},
		{"QueueDoesNotExist", &types.QueueDoesNotExist{}, false, false, false},
		{"InvalidMessageContents", &types.InvalidMessageContents{}, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fake := &fakeSQS{send: func(*sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
				return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessageBatch", Err: c.err}
			}}
			p, err := heraldaws.NewSQS(fake, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("https://sqs.eu-west-1.amazonaws.com/1/q")})
			require.NoError(t, err)
			envs := envelopes(t,
				herald.Message{Topic: "t", Key: "a", Payload: []byte("1")},
				herald.Message{Topic: "t", Key: "b", Payload: []byte("2")},
				herald.Message{Topic: "t", Key: "a", Payload: []byte("3")},
			)
			err = publish(t, p, envs)
			require.Error(t, err)
			var be *herald.BatchError
			if c.outage {
				require.Falsef(t, errors.As(err, &be), "AWS answered for no event: a plain error, not %v", err)
				require.Equal(t, c.unav, herald.IsUnavailable(err), "%v", err)
				require.Equal(t, 1, fake.calls, "no second round after a round without an answer")
				return
			}
			require.ErrorAs(t, err, &be)
			for _, i := range []int{0, 1} {
				require.Equal(t, c.permanent, herald.IsPermanent(be.Errs[i]), "event %d: %v", i, be.Errs[i])
				require.Equal(t, c.unav, herald.IsUnavailable(be.Errs[i]), "event %d: %v", i, be.Errs[i])
			}
			require.ErrorIs(t, be.Errs[2], herald.ErrHeldBack)
		})
	}
}

// cannedAWS answers every request with one response, as AWS would send it.
type cannedAWS struct {
	status  int
	header  http.Header
	body    string
	mu      sync.Mutex
	targets []string
}

func (c *cannedAWS) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.targets = append(c.targets, req.Header.Get("X-Amz-Target")+req.URL.RawQuery)
	c.mu.Unlock()
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: c.status, Header: c.header.Clone(), Body: io.NopCloser(strings.NewReader(c.body)), Request: req,
	}, nil
}

// The throttling answers SQS (AWS JSON protocol) and SNS (AWS query
// protocol) send, as the SDK decodes them, make Publish fail as an outage
// marked herald.Unavailable. moto does not throttle, so the answers are
// canned, in the services' documented wire formats.
func TestThrottledRequestFromTheSDK(t *testing.T) {
	t.Parallel()
	creds := credentials.NewStaticCredentialsProvider("AKIDTEST", "test-secret", "")
	envs := envelopes(t, herald.Message{Topic: "t", Key: "a", Payload: []byte("1")})

	sqsWire := &cannedAWS{
		status: 400,
		header: http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Query-Error": {"AWS.SimpleQueueService.RequestThrottled;Sender"}},
		body:   `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"Rate exceeded"}`,
	}
	sq := sqs.New(sqs.Options{Region: "eu-west-1", Credentials: creds, HTTPClient: &http.Client{Transport: sqsWire}, RetryMaxAttempts: 1})
	ps, err := heraldaws.NewSQS(sq, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("https://sqs.eu-west-1.amazonaws.com/1/q")})
	require.NoError(t, err)
	err = publish(t, ps, envs)
	require.True(t, herald.IsUnavailable(err), "%v", err)
	var api smithy.APIError
	require.ErrorAs(t, err, &api)
	require.Contains(t, []string{"RequestThrottled", "AWS.SimpleQueueService.RequestThrottled"}, api.ErrorCode())
	require.Equal(t, []string{"AmazonSQS.SendMessageBatch"}, sqsWire.targets)

	snsWire := &cannedAWS{
		status: 400,
		header: http.Header{"Content-Type": {"text/xml"}},
		body: `<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/"><Error><Type>Sender</Type>` +
			`<Code>Throttled</Code><Message>Rate exceeded</Message></Error><RequestId>` + uuid.NewString() + `</RequestId></ErrorResponse>`,
	}
	sn := sns.New(sns.Options{Region: "eu-west-1", Credentials: creds, HTTPClient: &http.Client{Transport: snsWire}, RetryMaxAttempts: 1})
	pn, err := heraldaws.NewSNS(sn, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed("arn:aws:sns:eu-west-1:1:t")})
	require.NoError(t, err)
	err = publish(t, pn, envs)
	require.True(t, herald.IsUnavailable(err), "%v", err)
	require.ErrorAs(t, err, &api)
	require.Equal(t, "Throttled", api.ErrorCode())
}

func TestNewChecksItsConfig(t *testing.T) {
	t.Parallel()
	fake := &fakeSQS{}
	_, err := heraldaws.NewSQS(nil, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("q")})
	require.ErrorContains(t, err, "client is nil")
	_, err = heraldaws.NewSQS(fake, nil)
	require.ErrorContains(t, err, "SQSConfig.QueueURL is required")
	_, err = heraldaws.NewSQS(fake, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("q"), MaxMessageBytes: -1})
	require.ErrorContains(t, err, "SQSConfig.MaxMessageBytes")
	_, err = heraldaws.NewSNS(&sns.Client{}, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed("t"), MaxConcurrentRequests: -1})
	require.ErrorContains(t, err, "SNSConfig.MaxConcurrentRequests")
	_, err = heraldaws.NewSNS(&sns.Client{}, nil)
	require.ErrorContains(t, err, "SNSConfig.TopicARN is required")
}

// An event whose destination function returns "" fails permanently, alone.
func TestEventWithoutDestinationIsPermanent(t *testing.T) {
	t.Parallel()
	fake := &fakeSQS{send: func(in *sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		out := &sqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
		}
		return out, nil
	}}
	p, err := heraldaws.NewSQS(fake, &heraldaws.SQSConfig{QueueURL: func(env *herald.Envelope) string {
		if env.Topic == "known" {
			return "https://sqs.eu-west-1.amazonaws.com/1/q"
		}
		return ""
	}})
	require.NoError(t, err)
	err = publish(t, p, envelopes(t,
		herald.Message{Topic: "known", Key: "a", Payload: []byte("1")},
		herald.Message{Topic: "unknown", Key: "b", Payload: []byte("2")},
	))
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.NoError(t, be.Errs[0])
	require.True(t, herald.IsPermanent(be.Errs[1]), "%v", be.Errs[1])
}

// When AWS answers no request of a round, the events not yet sent are
// given that round's error (unavailable here), never the permanent error
// an event of the round earned for itself; no second round is sent.
func TestRoundWithoutAnswerStopsWithItsOwnError(t *testing.T) {
	t.Parallel()
	fake := &fakeSQS{send: func(*sqs.SendMessageBatchInput) (*sqs.SendMessageBatchOutput, error) {
		return nil, &types.RequestThrottled{}
	}}
	p, err := heraldaws.NewSQS(fake, &heraldaws.SQSConfig{QueueURL: heraldaws.Fixed("https://sqs.eu-west-1.amazonaws.com/1/q"), MaxMessageBytes: 1024})
	require.NoError(t, err)
	envs := envelopes(t,
		herald.Message{Topic: "t", Key: "big", Payload: bytes.Repeat([]byte("x"), 2048)},
		herald.Message{Topic: "t", Key: "a", Payload: []byte("1")},
		herald.Message{Topic: "t", Key: "a", Payload: []byte("2")},
		herald.Message{Topic: "t", Key: "b", Payload: []byte("3")},
		herald.Message{Topic: "t", Key: "b", Payload: []byte("4")},
	)
	err = publish(t, p, envs)
	var be *herald.BatchError
	require.ErrorAs(t, err, &be, "the too-large event was answered for: per-event results")
	require.True(t, herald.IsPermanent(be.Errs[0]), "%v", be.Errs[0])
	for _, i := range []int{1, 2, 3, 4} {
		require.Truef(t, herald.IsUnavailable(be.Errs[i]), "event %d: %v", i, be.Errs[i])
		require.Falsef(t, herald.IsPermanent(be.Errs[i]), "event %d: %v", i, be.Errs[i])
	}
	require.Equal(t, 1, fake.calls, "one request in the first round, none after")
}
