package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldkafka"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/heraldredis"
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
	{name: "discard", target: targetDrainDiscard, note: "a publisher that confirms at once: the database's ceiling",
		open: func(context.Context, *env) (herald.Publisher, func(context.Context) (int64, error), func(), error) {
			return herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }), nil, func() {}, nil
		}},
	{name: "kafka", note: "franz-go against kfake, an in-process Kafka: no disk, no network", open: openKafka},
	{name: "redis", note: "the Redis server on 127.0.0.1:6379", open: openRedis},
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
	count := func(ctx context.Context) (int64, error) {
		st, err := e.nats.js.Stream(ctx, drainStream)
		if err != nil {
			return 0, err
		}
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
		return nil, nil, nil, fmt.Errorf("Redis on 127.0.0.1:6379: %w", err)
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
