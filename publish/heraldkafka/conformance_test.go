package heraldkafka_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldkafka"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// The shared publisher suite against an in-process cluster. Its topics are
// created on first use, with one partition each, so that Read can tell when
// it has seen everything stored on a topic.
func TestConformance(t *testing.T) {
	const tooLarge = 64 << 10
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	var topics atomic.Int64

	newPublisher := func(t *testing.T, addrs []string, timeout time.Duration) herald.Publisher {
		cl, err := heraldkafka.NewClient(addrs, kgo.AllowAutoTopicCreation())
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		p, err := heraldkafka.New(cl, &heraldkafka.Config{MaxMessageBytes: tooLarge - 1024, DeliveryTimeout: timeout})
		require.NoError(t, err)
		return p
	}
	publishertest.Run(t, publishertest.Harness{
		Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
		New:      func(t *testing.T) herald.Publisher { return newPublisher(t, addrs, 0) },
		Topic: func(*testing.T) string {
			return fmt.Sprintf("conformance.%d", topics.Add(1))
		},
		Read: func(t *testing.T, topic string, n int) []publishertest.Received {
			return readStored(t, addrs, topic, n)
		},
		// A short DeliveryTimeout: the suite waits on the publisher's own bound.
		Unreachable: func(t *testing.T) herald.Publisher {
			return newPublisher(t, []string{"127.0.0.1:1"}, time.Second)
		},
		TooLarge: tooLarge,
	})
}

// readStored reads topic (one partition) from the start until it has n
// records and everything stored on the topic by then, within 10s.
func readStored(t *testing.T, addrs []string, topic string, n int) []publishertest.Received {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	var (
		got  []publishertest.Received
		next int64 // offset after the last record read
		end  int64 = -1
	)
	for len(got) < n || next < end {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records from %q", len(got), n, topic)
		for _, r := range fs.Records() {
			m, err := heraldkafka.Parse(r)
			require.NoError(t, err)
			got = append(got, publishertest.ReceivedOf(m))
			next = r.Offset + 1
		}
		if len(got) >= n && end < 0 {
			end = endOffset(ctx, t, cons, topic)
		}
	}
	return got
}

// endOffset returns the offset after the last record stored on topic's
// partition 0.
func endOffset(ctx context.Context, t *testing.T, cl *kgo.Client, topic string) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = 0
	rp.Timestamp = -1 // latest
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	require.NoError(t, err)
	require.Len(t, resp.Topics, 1)
	require.Len(t, resp.Topics[0].Partitions, 1)
	p := resp.Topics[0].Partitions[0]
	require.Zero(t, p.ErrorCode)
	return p.Offset
}
