package heraldpubsub_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/publishertest"
)

func TestMain(m *testing.M) {
	testenv.Main(m,
		// A subscriber's keep-alive goroutine notices that Receive
		// returned only at its next tick, up to 10s later.
		goleak.IgnoreTopFunction("cloud.google.com/go/pubsub/v2.(*messageIterator).streamKeepAliveHandler"),
	)
}

// project is the project of every test's topics; pstest takes any.
const project = "herald-test"

// fake is an in-process Pub/Sub server of the test's own (pstest), and a
// client from NewClient connected to it the way the emulator is reached.
type fake struct {
	srv    *pstest.Server
	client *pubsub.Client

	mu   sync.Mutex
	subs map[string]string // topic ID -> its subscription
}

// publishReactor lets a test answer publish requests itself: a non-nil
// error refuses the request, nil lets the server store it.
type publishReactor func(req *pb.PublishRequest) error

func (r publishReactor) React(req any) (bool, any, error) {
	pr, ok := req.(*pb.PublishRequest)
	if !ok {
		return false, nil, nil
	}
	if err := r(pr); err != nil {
		return true, nil, err
	}
	return false, nil, nil
}

// newFake starts a server whose publish requests go through react first
// (nil: none).
func newFake(t *testing.T, react publishReactor) *fake {
	t.Helper()
	var opts []pstest.ServerReactorOption
	if react != nil {
		opts = append(opts, pstest.ServerReactorOption{FuncName: "Publish", Reactor: react})
	}
	srv := pstest.NewServer(opts...)
	t.Cleanup(func() { _ = srv.Close() })
	// pstest hands a subscription with message ordering the oldest
	// message of each key, by publish time: make the times strictly
	// increasing, as the service's order of receipt is, so that two
	// messages stored within the clock's resolution keep their order.
	var (
		clockMu sync.Mutex
		last    time.Time
	)
	srv.SetTimeNowFunc(func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		now := time.Now()
		if !now.After(last) {
			now = last.Add(time.Nanosecond)
		}
		last = now
		return now
	})
	client, err := heraldpubsub.NewClient(context.Background(), project, heraldpubsub.EmulatorOptions(srv.Addr)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return &fake{srv: srv, client: client, subs: map[string]string{}}
}

func topicName(id string) string { return "projects/" + project + "/topics/" + id }

// topic creates a topic and a subscription to it with message ordering
// enabled, which read drains.
func (f *fake) topic(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	_, err := f.client.TopicAdminClient.CreateTopic(ctx, &pb.Topic{Name: topicName(id)})
	require.NoError(t, err)
	sub := "projects/" + project + "/subscriptions/" + id + "-sub"
	_, err = f.client.SubscriptionAdminClient.CreateSubscription(ctx, &pb.Subscription{
		Name: sub, Topic: topicName(id), EnableMessageOrdering: true, AckDeadlineSeconds: 60,
	})
	require.NoError(t, err)
	f.mu.Lock()
	f.subs[id] = sub
	f.mu.Unlock()
}

func (f *fake) publisher(t *testing.T, cfg *heraldpubsub.Config) *heraldpubsub.Publisher {
	t.Helper()
	p, err := heraldpubsub.New(f.client, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// stored returns, in the order the server stored them, the messages
// published to a topic.
func (f *fake) stored(id string) []*pstest.Message {
	var out []*pstest.Message
	for _, m := range f.srv.Messages() {
		if m.Topic == topicName(id) {
			out = append(out, m)
		}
	}
	return out
}

// read pulls the topic's subscription, acknowledging each message, until n
// messages arrived and as many as the server stored for the topic, within
// 10s, and returns them parsed, in arrival order. With message ordering,
// the server hands out a key's next message only once the one before is
// acknowledged.
func (f *fake) read(t *testing.T, id string, n int) []publishertest.Received {
	t.Helper()
	f.mu.Lock()
	sub, ok := f.subs[id]
	f.mu.Unlock()
	require.True(t, ok, "topic %s has no subscription", id)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var got []publishertest.Received
	for len(got) < n || len(got) < len(f.stored(id)) {
		resp, err := f.client.SubscriptionAdminClient.Pull(ctx, &pb.PullRequest{Subscription: sub, MaxMessages: 1000})
		require.NoError(t, err, "read %d of %d messages from %s", len(got), n, id)
		var acks []string
		for _, rm := range resp.ReceivedMessages {
			acks = append(acks, rm.AckId)
			m, err := heraldpubsub.Parse(received(rm))
			require.NoError(t, err)
			got = append(got, publishertest.ReceivedOf(m))
		}
		if len(acks) > 0 {
			require.NoError(t, f.client.SubscriptionAdminClient.Acknowledge(ctx, &pb.AcknowledgeRequest{Subscription: sub, AckIds: acks}))
		}
	}
	return got
}

// received is a pulled message as a subscriber's Receive hands it over.
func received(rm *pb.ReceivedMessage) *pubsub.Message {
	return &pubsub.Message{
		ID: rm.Message.MessageId, Data: rm.Message.Data, Attributes: rm.Message.Attributes,
		OrderingKey: rm.Message.OrderingKey, PublishTime: rm.Message.PublishTime.AsTime(),
	}
}
