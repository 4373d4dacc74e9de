package heraldpubsub_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/pubsub/v2"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

// batch turns messages into envelopes as an ordered relay hands them over:
// validated as a Writer does, ordered when keyed.
func batch(t *testing.T, msgs ...herald.Message) []herald.Envelope {
	t.Helper()
	prepared, err := herald.Prepare(msgs, 1<<20)
	require.NoError(t, err)
	envs := make([]herald.Envelope, len(prepared))
	for i, m := range prepared {
		envs[i] = herald.Envelope{Message: m, Seq: int64(i + 1), Attempt: 1, CreatedAt: time.Now(), Ordered: m.Key != ""}
	}
	return envs
}

// batchErrs returns the per-event results of a Publish that must have
// reported some.
func batchErrs(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAsf(t, err, &be, "per-event results; got %v", err)
	require.Len(t, be.Errs, n)
	return be.Errs
}

// storedData returns the data of a topic's stored messages, in the order
// the server stored them.
func (f *fake) storedData(id string) []string {
	var out []string
	for _, m := range f.stored(id) {
		out = append(out, string(m.Data))
	}
	return out
}

// An ordered event carries its key as the ordering key; every event carries
// Herald's fields and the producer's headers as attributes and its payload
// as the data.
func TestPublishCarriesTheEventAsAMessage(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.topic(t, "orders")
	envs := batch(t,
		herald.Message{Topic: "orders", Key: "order-42", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			EventVersion: 3, AggregateVersion: 42, Payload: []byte{0, 1, 0xff}, Headers: map[string]string{"X-Tenant": "acme"}},
		herald.Message{Topic: "orders", Payload: []byte("no key")},
		herald.Message{Topic: "orders", Key: "k-unordered", Payload: []byte("unordered topic")},
	)
	envs[2].Ordered = false // a topic the relay does not order
	require.NoError(t, f.publisher(t, nil).Publish(t.Context(), envs))

	stored := map[string]*struct{ key string }{}
	for _, m := range f.stored("orders") {
		stored[m.Attributes[herald.HeaderID]] = &struct{ key string }{m.OrderingKey}
	}
	require.Len(t, stored, 3)
	first := f.stored("orders")
	byID := map[string]int{}
	for i, m := range first {
		byID[m.Attributes[herald.HeaderID]] = i
	}
	m := first[byID[envs[0].ID]]
	require.Equal(t, "order-42", m.OrderingKey)
	require.Equal(t, []byte{0, 1, 0xff}, m.Data)
	require.Equal(t, map[string]string{
		herald.HeaderID: envs[0].ID, herald.HeaderTopic: "orders", herald.HeaderKey: "order-42",
		herald.HeaderType: "order.placed", herald.HeaderAggregateType: "order", herald.HeaderAggregateID: "42",
		herald.HeaderEventVersion: "3", herald.HeaderAggregateVersion: "42",
		"X-Tenant": "acme",
	}, m.Attributes)
	require.Empty(t, first[byID[envs[1].ID]].OrderingKey, "an event without a key has no ordering key")
	unordered := first[byID[envs[2].ID]]
	require.Empty(t, unordered.OrderingKey, "an event the relay does not order has no ordering key")
	require.Equal(t, "k-unordered", unordered.Attributes[herald.HeaderKey], "its key is still carried")
}

// Config.Project and Config.TopicPrefix name the Pub/Sub topic; the event's
// own topic travels in Herald-Topic.
func TestProjectAndTopicPrefixNameTheTopic(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	const other = "projects/other-project/topics/prod-orders"
	_, err := f.client.TopicAdminClient.CreateTopic(t.Context(), &pb.Topic{Name: other})
	require.NoError(t, err)
	p := f.publisher(t, &heraldpubsub.Config{Project: "other-project", TopicPrefix: "prod-"})
	envs := batch(t, herald.Message{Topic: "orders", Key: "k", Payload: []byte("x")})
	require.NoError(t, p.Publish(t.Context(), envs))

	var got []*pubsub.Message
	for _, m := range f.srv.Messages() {
		require.Equal(t, other, m.Topic)
		got = append(got, &pubsub.Message{Data: m.Data, Attributes: m.Attributes})
	}
	require.Len(t, got, 1)
	parsed, err := heraldpubsub.Parse(got[0])
	require.NoError(t, err)
	require.Equal(t, "orders", parsed.Topic)
}

// After a failed publish the client refuses the key's further messages until
// ResumePublish: Publish resumes it, so that the relay's retry goes through,
// and the key's later events in the batch are held back, unsent.
func TestFailedKeyIsResumedSoTheRetryGoesThrough(t *testing.T) {
	t.Parallel()
	var refused atomic.Bool
	f := newFake(t, func(req *pb.PublishRequest) error {
		for _, m := range req.Messages {
			if string(m.Data) == "a1" && refused.CompareAndSwap(false, true) {
				return status.Error(codes.Unavailable, "the backend went away")
			}
		}
		return nil
	})
	f.topic(t, "orders")
	p := f.publisher(t, nil)
	msg := func(key, data string) herald.Message {
		return herald.Message{Topic: "orders", Key: key, Payload: []byte(data)}
	}
	envs := batch(t, msg("a", "a1"), msg("b", "b1"), msg("a", "a2"), msg("a", "a3"), msg("b", "b2"))

	errs := batchErrs(t, p.Publish(t.Context(), envs), len(envs))
	require.Truef(t, herald.IsUnavailable(errs[0]), "a refused request costs no attempt: %v", errs[0])
	require.ErrorIs(t, errs[2], herald.ErrHeldBack)
	require.ErrorIs(t, errs[3], herald.ErrHeldBack)
	require.NoError(t, errs[1])
	require.NoError(t, errs[4])
	require.Equal(t, []string{"b1", "b2"}, f.storedData("orders"), "nothing of key a after its failure")
	require.Zero(t, heraldpubsub.Pending(p, "orders", "a"))

	// The relay sends the key's events again, in order.
	retry := []herald.Envelope{envs[0], envs[2], envs[3]}
	for i := range retry {
		retry[i].Attempt = 2
	}
	require.NoError(t, p.Publish(t.Context(), retry), "the key was resumed")
	require.Equal(t, []string{"b1", "b2", "a1", "a2", "a3"}, f.storedData("orders"))
}

// An event's own failure is reported as such when a later event of its key
// was refused before sending.
func TestEarlierFailureIsReportedAsItselfBeforeARefusedEvent(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(req *pb.PublishRequest) error {
		for _, m := range req.Messages {
			if string(m.Data) == "a1" {
				return status.Error(codes.Unavailable, "the backend went away")
			}
		}
		return nil
	})
	f.topic(t, "orders")
	var logs strings.Builder
	var logMu sync.Mutex
	p := f.publisher(t, &heraldpubsub.Config{MaxMessageBytes: 4096,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))})
	envs := batch(t,
		herald.Message{Topic: "orders", Key: "a", Payload: []byte("a1")},
		herald.Message{Topic: "orders", Key: "a", Payload: make([]byte, 5000)},
		herald.Message{Topic: "orders", Key: "a", Payload: []byte("a3")},
	)
	errs := batchErrs(t, p.Publish(t.Context(), envs), len(envs))
	require.Truef(t, herald.IsUnavailable(errs[0]), "%v", errs[0])
	require.NotErrorIs(t, errs[0], herald.ErrHeldBack)
	require.True(t, herald.IsPermanent(errs[1]))
	require.ErrorIs(t, errs[2], herald.ErrHeldBack)
	logMu.Lock()
	defer logMu.Unlock()
	require.NotContains(t, logs.String(), "level=ERROR")
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// A Publish that stops waiting leaves its messages in the client. A key
// whose abandoned message then fails stays paused while any message of it
// is in flight, so a message queued behind the failed one is never
// published after it; once nothing of the key is in flight, it is resumed.
func TestAbandonedKeyIsResumedOnlyOnceNothingOfItIsInFlight(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var releaseOnce sync.Once
	var refused atomic.Bool
	f := newFake(t, func(req *pb.PublishRequest) error {
		for _, m := range req.Messages {
			if string(m.Data) == "slow" && refused.CompareAndSwap(false, true) {
				<-release
				return status.Error(codes.Unavailable, "the backend went away")
			}
		}
		return nil
	})
	f.topic(t, "orders")
	p := f.publisher(t, nil)
	// The server is stuck until released: release it even when the test
	// fails early (cleanups run last first), or closing the publisher and
	// the server would wait forever.
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	first := batch(t, herald.Message{Topic: "orders", Key: "a", Payload: []byte("slow")})
	second := batch(t, herald.Message{Topic: "orders", Key: "a", Payload: []byte("after")})

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	err := p.Publish(ctx, first)
	require.Error(t, err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, 1, heraldpubsub.Pending(p, "orders", "a"), "the abandoned message is still in the client")

	// The next event of the key queues behind it in the client.
	done := make(chan error, 1)
	go func() { done <- p.Publish(t.Context(), second) }()
	require.Eventually(t, func() bool { return heraldpubsub.Pending(p, "orders", "a") == 2 }, 10*time.Second, time.Millisecond)
	releaseOnce.Do(func() { close(release) })
	err = <-done
	require.Truef(t, herald.IsUnavailable(err), "refused unsent, at no attempt's cost: %v", err)
	require.Empty(t, f.storedData("orders"), "nothing published after the failed message")

	require.Eventually(t, func() bool { return heraldpubsub.Pending(p, "orders", "a") == 0 }, 10*time.Second, time.Millisecond)
	retry := append(first, second...)
	require.NoError(t, p.Publish(t.Context(), retry), "the key was resumed")
	require.Equal(t, []string{"slow", "after"}, f.storedData("orders"))
}

// Throttling, an unavailable service and refused permissions cost the
// events no attempt, and a client from NewClient leaves the retrying to
// the relay: one request each.
func TestRefusalsForLoadAndAccessAreUnavailable(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	requests := map[string]int{}
	refusal := map[string]codes.Code{
		topicName("throttled"): codes.ResourceExhausted,
		topicName("down"):      codes.Unavailable,
		topicName("denied"):    codes.PermissionDenied,
	}
	f := newFake(t, func(req *pb.PublishRequest) error {
		mu.Lock()
		requests[req.Topic]++
		mu.Unlock()
		if code, ok := refusal[req.Topic]; ok {
			return status.Error(code, "refused")
		}
		return nil
	})
	for _, id := range []string{"open", "throttled", "down", "denied"} {
		f.topic(t, id)
	}
	p := f.publisher(t, nil)
	envs := batch(t,
		herald.Message{Topic: "open", Key: "k", Payload: []byte("1")},
		herald.Message{Topic: "throttled", Key: "k", Payload: []byte("2")},
		herald.Message{Topic: "down", Key: "k", Payload: []byte("3")},
		herald.Message{Topic: "denied", Key: "k", Payload: []byte("4")},
	)
	errs := batchErrs(t, p.Publish(t.Context(), envs), len(envs))
	require.NoError(t, errs[0])
	for i, want := range []string{"throttled", "service unavailable", "roles/pubsub.publisher"} {
		err := errs[i+1]
		require.Truef(t, herald.IsUnavailable(err), "event %d: %v", i+1, err)
		require.ErrorContains(t, err, want)
	}
	mu.Lock()
	require.Equal(t, map[string]int{topicName("open"): 1, topicName("throttled"): 1, topicName("down"): 1, topicName("denied"): 1},
		requests, "no request retried by the client")
	mu.Unlock()

	// When the service answered for no event, the batch failed as a whole.
	err := p.Publish(t.Context(), batch(t, herald.Message{Topic: "throttled", Key: "j", Payload: []byte("5")}))
	require.Error(t, err)
	require.False(t, errors.As(err, new(*herald.BatchError)), "an outage, not per-event results: %v", err)
}

// A topic that does not exist is an ordinary failure that says so.
func TestMissingTopicSaysSo(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.topic(t, "present")
	envs := batch(t,
		herald.Message{Topic: "missing", Key: "k", Payload: []byte("1")},
		herald.Message{Topic: "present", Key: "k", Payload: []byte("2")},
	)
	errs := batchErrs(t, f.publisher(t, nil).Publish(t.Context(), envs), len(envs))
	require.ErrorContains(t, errs[0], `topic "missing" does not exist in project "herald-test"`)
	require.False(t, herald.IsPermanent(errs[0]))
	require.False(t, herald.IsUnavailable(errs[0]))
	require.Equal(t, codes.NotFound, status.Code(errs[0]))
	require.NoError(t, errs[1])
}

// What Pub/Sub would refuse is found before sending: the event fails
// permanently, and its key's later events are held back unsent.
func TestWhatPubSubRefusesIsPermanentAndHoldsBackItsKey(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.topic(t, "orders")
	p := f.publisher(t, &heraldpubsub.Config{MaxMessageBytes: 4096})
	for _, c := range []struct {
		name, topic, reason string
		headers             map[string]string
		payload             int
	}{
		{"ShortTopicID", "ab", "shorter than 3", nil, 1},
		{"TopicIDNotStartingWithALetter", "1orders", "does not start with a letter", nil, 1},
		{"TopicIDStartingWithGoog", "goog-orders", `starts with "goog"`, nil, 1},
		{"TopicIDWithASlash", "orders/eu", "character other than", nil, 1},
		{"AttributeNameStartingWithGoog", "orders", `Pub/Sub reserves attribute names starting with "goog"`, map[string]string{"goog-trace": "x"}, 1},
		{"AttributeValueOver1024Bytes", "orders", "over Pub/Sub's attribute value limit of 1024", map[string]string{"X-Long": strings.Repeat("v", 1025)}, 1},
		{"MessageOverMaxMessageBytes", "orders", "over the limit of 4096 (Config.MaxMessageBytes)", nil, 4097},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "key-" + c.name
			envs := batch(t,
				herald.Message{Topic: c.topic, Key: key, Payload: make([]byte, c.payload), Headers: c.headers},
				herald.Message{Topic: c.topic, Key: key, Payload: []byte("later")},
				herald.Message{Topic: "orders", Key: "other-" + c.name, Payload: []byte("other")},
			)
			before := len(f.stored("orders"))
			errs := batchErrs(t, p.Publish(t.Context(), envs), len(envs))
			require.Truef(t, herald.IsPermanent(errs[0]), "%v", errs[0])
			require.ErrorContains(t, errs[0], c.reason)
			require.ErrorIs(t, errs[1], herald.ErrHeldBack)
			require.NoError(t, errs[2])
			stored := f.stored("orders")[before:]
			require.Len(t, stored, 1, "only the other key's event was sent")
			require.Equal(t, envs[2].ID, stored[0].Attributes[herald.HeaderID])
		})
	}
}

// A message the client finds too large for a request is permanent too.
func TestOversizedForTheClientIsPermanent(t *testing.T) {
	t.Parallel()
	err := heraldpubsub.Classify(pubsub.ErrOversizedMessage)
	require.True(t, herald.IsPermanent(err))
	require.ErrorIs(t, err, pubsub.ErrOversizedMessage)
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	_, err := heraldpubsub.New(nil, nil)
	require.ErrorContains(t, err, "client is nil")
	for _, c := range []struct {
		cfg   heraldpubsub.Config
		field string
	}{
		{heraldpubsub.Config{Project: "a/b"}, "Config.Project"},
		{heraldpubsub.Config{MaxMessageBytes: -1}, "Config.MaxMessageBytes"},
		{heraldpubsub.Config{MaxMessageBytes: heraldpubsub.DefaultMaxMessageBytes + 1}, "Config.MaxMessageBytes"},
		{heraldpubsub.Config{Timeout: -time.Second}, "Config.Timeout"},
		{heraldpubsub.Config{TopicPrefix: "prod/"}, "Config.TopicPrefix"},
		{heraldpubsub.Config{TopicPrefix: strings.Repeat("p", 255)}, "Config.TopicPrefix"},
	} {
		_, err := heraldpubsub.New(f.client, &c.cfg)
		require.ErrorContains(t, err, c.field, "%+v", c.cfg)
	}
}

func TestPublishAfterCloseFails(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	f.topic(t, "orders")
	p := f.publisher(t, nil)
	envs := batch(t, herald.Message{Topic: "orders", Key: "k", Payload: []byte("1")})
	require.NoError(t, p.Publish(t.Context(), envs))
	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "closing twice")
	require.ErrorIs(t, p.Publish(t.Context(), envs), heraldpubsub.ErrClosed)
	require.Len(t, f.stored("orders"), 1)
}

// Ping counts any answer of the service as reachable, PermissionDenied
// included (a publish-only account may not list topics), and fails when
// the service is unreachable or refuses the credentials.
func TestPingTellsAReachableServiceFromAnUnreachableOne(t *testing.T) {
	t.Parallel()
	f := newFake(t, nil)
	require.NoError(t, f.publisher(t, nil).Ping(t.Context()))

	for code, reachable := range map[codes.Code]bool{codes.PermissionDenied: true, codes.Unauthenticated: false} {
		srv := pstest.NewServer(pstest.WithErrorInjection("ListTopics", code, "no"))
		t.Cleanup(func() { _ = srv.Close() })
		client, err := heraldpubsub.NewClient(t.Context(), project, heraldpubsub.EmulatorOptions(srv.Addr)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = client.Close() })
		p, err := heraldpubsub.New(client, nil)
		require.NoError(t, err)
		err = p.Ping(t.Context())
		if reachable {
			require.NoError(t, err, "%s", code)
		} else {
			require.Equal(t, code, status.Code(err))
		}
	}

	client, err := heraldpubsub.NewClient(t.Context(), project, heraldpubsub.EmulatorOptions("127.0.0.1:1")...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	p, err := heraldpubsub.New(client, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	require.Error(t, p.Ping(ctx))
}
