package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"

	pubsubpb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"cloud.google.com/go/pubsub/v2/pstest"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldkafka"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
	"github.com/herald-outbox/herald/publish/heraldredis"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// drainSink is a destination the drain benchmark can publish to: open
// returns its publisher, a count of what it holds (nil when it cannot tell)
// and what to close.
type drainSink struct {
	name   string
	target float64 // events/s to reach; 0 for none
	note   string  // what the destination is, for the report
	open   func(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error)
}

var drainSinks = []drainSink{
	{name: "jetstream", target: targetDrainJetStream, note: "embedded nats-server, file storage", open: openJetStream},
	{name: "discard", target: targetDrainDiscard, note: "a publisher that confirms at once",
		open: func(context.Context, *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
			return herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }), nil, func() {}, nil
		}},
	{name: "kafka", note: "franz-go against kfake, an in-process Kafka: no disk, no network", open: openKafka},
	{name: "redis", note: "the Redis server on 127.0.0.1:6379", open: openRedis},
	{name: "rabbitmq", note: "the RabbitMQ server on 127.0.0.1:5672, publisher confirms", open: openRabbit},
	{name: "webhook", note: "signed POSTs to an in-process HTTP server on loopback", open: openWebhook},
	{name: "pubsub", note: "the Pub/Sub client against pstest, its in-process fake server: no quotas, no disk", open: openPubSub},
}

// sinksNamed returns the sinks of a comma-separated list.
func sinksNamed(list string) ([]drainSink, error) {
	var out []drainSink
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range drainSinks {
			if s.name == name {
				out, found = append(out, s), true
			}
		}
		if !found {
			var names []string
			for _, s := range drainSinks {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("--to: unknown destination %q: want some of %s", name, strings.Join(names, ","))
		}
	}
	return out, nil
}

func openJetStream(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	pub, err := heraldnats.New(e.nats.pub, &heraldnats.Config{Logger: e.log})
	if err != nil {
		return nil, nil, nil, err
	}
	// Every drain starts with an empty stream, as the other destinations
	// do, so that the count is this drain's.
	st, err := e.nats.js.Stream(ctx, drainStream)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := st.Purge(ctx); err != nil {
		return nil, nil, nil, fmt.Errorf("purging stream %s: %w", drainStream, err)
	}
	count := func(ctx context.Context) (int64, error) {
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return int64(info.State.Msgs), nil
	}
	return pub, count, func() {}, nil
}

func openKafka(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, drainSubject))
	if err != nil {
		return nil, nil, nil, err
	}
	client, err := heraldkafka.NewClient(cluster.ListenAddrs())
	if err != nil {
		cluster.Close()
		return nil, nil, nil, err
	}
	pub, err := heraldkafka.New(client, &heraldkafka.Config{Logger: e.log})
	if err != nil {
		client.Close()
		cluster.Close()
		return nil, nil, nil, err
	}
	count := func(ctx context.Context) (int64, error) {
		cons, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics(drainSubject),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			return 0, err
		}
		defer cons.Close()
		want := int64(e.o.events)
		var n int64
		for n < want && ctx.Err() == nil {
			fetches := cons.PollFetches(ctx)
			n += int64(fetches.NumRecords())
		}
		return n, nil
	}
	return pub, count, func() { client.Close(); cluster.Close() }, nil
}

func openRedis(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, nil, fmt.Errorf("redis on 127.0.0.1:6379: %w", err)
	}
	stream := "herald-bench:" + e.schema + ":"
	pub, err := heraldredis.New(rdb, &heraldredis.Config{StreamPrefix: stream, Logger: e.log})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	key := stream + drainSubject
	rdb.Del(ctx, key)
	count := func(ctx context.Context) (int64, error) { return rdb.XLen(ctx, key).Result() }
	return pub, count, func() { rdb.Del(context.Background(), key); _ = rdb.Close() }, nil
}

func openRabbit(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	const url = "amqp://guest:guest@127.0.0.1:5672/"
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("RabbitMQ on 127.0.0.1:5672: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	// The default exchange routes each event to the queue named by its
	// topic.
	if _, err := ch.QueueDeclare(drainSubject, false, false, false, false, nil); err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	if _, err := ch.QueuePurge(drainSubject, false); err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	dial, err := heraldrabbit.Dialer(url, amqp.Config{})
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	pub, err := heraldrabbit.New(dial, &heraldrabbit.Config{Logger: e.log})
	if err != nil {
		_ = conn.Close()
		return nil, nil, nil, err
	}
	count := func(context.Context) (int64, error) {
		q, err := ch.QueueDeclarePassive(drainSubject, false, false, false, false, nil)
		return int64(q.Messages), err
	}
	return pub, count, func() {
		_ = pub.Close()
		_, _ = ch.QueueDelete(drainSubject, false, false, false)
		_ = conn.Close()
	}, nil
}

func openWebhook(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	pub, err := heraldwebhook.New(&heraldwebhook.Config{
		Default: heraldwebhook.Endpoint{URL: srv.URL + "/events"}, Secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
		AllowedNetworks: []string{"127.0.0.0/8"}, MaxConcurrency: 64, Logger: e.log,
	})
	if err != nil {
		srv.Close()
		return nil, nil, nil, err
	}
	count := func(context.Context) (int64, error) { return received.Load(), nil }
	return pub, count, func() { _ = pub.Close(); srv.Close() }, nil
}

// openPubSub starts pstest, the Pub/Sub client library's in-process fake
// server, with the drain's topic and a subscription to it. The count is
// what a consumer receives: it pulls and acknowledges the subscription
// until it has the backlog, then once more to see any message beyond it.
func openPubSub(ctx context.Context, e *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
	const project = "herald-bench"
	srv := pstest.NewServer()
	client, err := heraldpubsub.NewClient(ctx, project, heraldpubsub.EmulatorOptions(srv.Addr)...)
	if err != nil {
		_ = srv.Close()
		return nil, nil, nil, err
	}
	closeAll := func() { _ = client.Close(); _ = srv.Close() }
	topic := "projects/" + project + "/topics/" + drainSubject
	sub := "projects/" + project + "/subscriptions/herald-bench-drain"
	if _, err := client.TopicAdminClient.CreateTopic(ctx, &pubsubpb.Topic{Name: topic}); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("creating topic %s: %w", topic, err)
	}
	// Unordered: the count needs no order, and an ordered subscription
	// hands out one message of a key per pull.
	if _, err := client.SubscriptionAdminClient.CreateSubscription(ctx, &pubsubpb.Subscription{
		Name: sub, Topic: topic, AckDeadlineSeconds: 600,
	}); err != nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("creating subscription %s: %w", sub, err)
	}
	pub, err := heraldpubsub.New(client, &heraldpubsub.Config{Project: project, Logger: e.log})
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	count := func(ctx context.Context) (int64, error) {
		want := int64(e.o.events)
		var n int64
		// With nothing to hand out, pstest answers empty after 500ms: stop
		// at the first empty answer once the backlog is in, or after 10
		// (5s with nothing new) short of it.
		for empty := 0; empty < 10; {
			resp, err := client.SubscriptionAdminClient.Pull(ctx, &pubsubpb.PullRequest{Subscription: sub, MaxMessages: 1000})
			if err != nil {
				return n, err
			}
			got := resp.GetReceivedMessages()
			if len(got) == 0 {
				if n >= want {
					return n, nil
				}
				empty++
				continue
			}
			empty = 0
			ids := make([]string, len(got))
			for i, m := range got {
				ids[i] = m.GetAckId()
			}
			n += int64(len(got))
			if err := client.SubscriptionAdminClient.Acknowledge(ctx, &pubsubpb.AcknowledgeRequest{Subscription: sub, AckIds: ids}); err != nil {
				return n, err
			}
		}
		return n, nil
	}
	return pub, count, func() { _ = pub.Close(); closeAll() }, nil
}
