package heraldkafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// Two relays drain a PostgreSQL outbox into a six-partition topic of a
// three-broker kfake cluster (three replicas, as kfake reports them) while
// the partition leaders move several times and one broker is removed and
// added back on its port. Every event reaches the topic exactly once, each
// key's events in commit order within the key's partition, and the faults
// cost no attempts: franz-go follows the leaders itself, so the relays never
// see a failed publish.
func TestRelayDrainsToAKafkaClusterAcrossLeaderMovesAndABrokerRestart(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	const (
		topic      = "orders.placed"
		partitions = 6
		keys       = 300
	)

	cluster, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(partitions, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	seeds := cluster.ListenAddrs()
	require.Len(t, seeds, 3)
	require.Equal(t, 3, cluster.TopicInfo(topic).NumReplicas)

	pool := testenv.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)

	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var relays []*herald.Relay
	for i := range 2 {
		cl, err := heraldkafka.NewClient(seeds)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		pub, err := heraldkafka.New(cl, nil)
		require.NoError(t, err)
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: store, Publisher: pub, Logger: logger.With("relay", i), BatchSize: 100,
			PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
			OutageBackoffCap: 200 * time.Millisecond, PublishTimeout: 10 * time.Second, Lease: 30 * time.Second,
			Retry: herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 100, MaxAge: time.Hour},
		})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx))
		// Registered after the client's Close, so it runs first: the
		// relay stops before its client closes.
		t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })
		relays = append(relays, relay)
	}
	published := func() int64 {
		var n int64
		for _, r := range relays {
			n += r.Stats().Published
		}
		return n
	}

	// One producer commits small transactions for the whole run, so events
	// are written, claimed and in flight at every step of the faults. Its
	// commits are sequential: event i committed before event i+1.
	var (
		written atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		werr    error
	)
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond) // paces the producer; nothing waits on it
		defer tick.Stop()
		for i := 0; ; {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			tx, err := pool.Begin(ctx)
			if err != nil {
				werr = err
				return
			}
			msgs := make([]herald.Message, 0, 5)
			for range 5 {
				msgs = append(msgs, herald.Message{Topic: topic, Key: strconv.Itoa(i % keys), Payload: []byte(strconv.Itoa(i))})
				i++
			}
			if err := w.WriteTx(ctx, tx, msgs...); err != nil {
				_ = tx.Rollback(ctx)
				werr = err
				return
			}
			if err := tx.Commit(ctx); err != nil {
				werr = err
				return
			}
			written.Store(int64(i))
		}
	})
	stopWriter := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}
	t.Cleanup(stopWriter)
	// progress waits until more events are written and published than
	// when it was called: the relays are draining at this step.
	progress := func(step string) {
		w0, p0 := written.Load(), published()
		require.Eventually(t, func() bool { return written.Load() >= w0+400 && published() >= p0+400 },
			60*time.Second, 5*time.Millisecond, "no progress %s", step)
	}
	// epochs sums the partitions' leader epochs, which every move bumps.
	epochs := func() int32 {
		var n int32
		for _, p := range cluster.PartitionInfos(topic) {
			n += p.Epoch
		}
		return n
	}

	progress("before the faults")
	epoch0 := epochs()
	for round := range 3 {
		// Every partition gets a leader drawn at random, and partition 0
		// surely moves, to the next broker.
		cluster.ShufflePartitionLeaders()
		leader := cluster.LeaderFor(topic, 0)
		require.NoError(t, cluster.MoveTopicPartition(topic, 0, (leader+1)%3))
		progress(fmt.Sprintf("after leader move %d", round+1))
	}

	// The broker to remove is the one leading partition 0, so that it leads
	// at least one partition when it goes; its partitions move to the other
	// two. It comes back under its id, and the partitions are spread over
	// all three again. It comes back on a new port: kfake's RemoveNode
	// closes the broker's listener but not the connections it accepted, so
	// a client would keep producing to the removed broker over its old
	// connection (refused as not the leader, forever) were the address the
	// same; a new address makes franz-go drop that connection, as a real
	// broker's restart would.
	down := cluster.LeaderFor(topic, 0)
	require.NoError(t, cluster.RemoveNode(down))
	for _, p := range cluster.PartitionInfos(topic) {
		require.NotEqual(t, down, p.Leader, "partition %d still led by the removed broker", p.Partition)
	}
	progress("with a broker removed")
	node, _, err := cluster.AddNode(down, 0)
	require.NoError(t, err)
	require.Equal(t, down, node)
	progress("after the broker came back")
	cluster.ShufflePartitionLeaders()
	progress("after a last leader move")
	stopWriter()
	require.NoError(t, werr)
	events := int(written.Load())
	// Three rounds of two moves each, a removal and an addition (each
	// reshuffles every partition) and a last shuffle.
	require.GreaterOrEqual(t, epochs()-epoch0, int32(partitions*(3+3)), "the partition leaders did not move as often as asked")

	if !assert.Eventually(t, func() bool {
		var ready int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE state <> 'published'`).Scan(&ready))
		return ready == 0
	}, 60*time.Second, 10*time.Millisecond, "the relays did not publish every event") {
		// Where the rows stuck says which fault the relays did not get over.
		rows, err := pool.Query(ctx, `SELECT state::text, attempts, count(*) FROM `+store.Table()+` GROUP BY 1, 2`)
		require.NoError(t, err)
		for rows.Next() {
			var st string
			var a, n int
			require.NoError(t, rows.Scan(&st, &a, &n))
			t.Logf("state %s attempts %d: %d rows", st, a, n)
		}
		t.Fatalf("relay logs:\n%s", filterLogs(logs.String()))
	}

	// The relays spent no attempt on the faults: a produce sent to a broker
	// that no longer leads its partition is refused with
	// NOT_LEADER_FOR_PARTITION, a retriable error on which franz-go reloads
	// the metadata and sends again to the new leader, within the same
	// Publish; the relay sees a success. So every row was published at its
	// first attempt.
	var retried, maxAttempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempts > 1), coalesce(max(attempts), 0) FROM `+store.Table()).Scan(&retried, &maxAttempts))
	require.Zero(t, retried, "events spent attempts on the faults (max attempts %d)", maxAttempts)
	for _, r := range relays {
		require.Zero(t, r.Stats().Dead, "dead events")
	}

	// Read the whole topic: up to each partition's high watermark, which
	// counts every record the brokers kept (no transactions here, so no
	// control records).
	var total int64
	end := make(map[int32]int64, partitions)
	for _, p := range cluster.PartitionInfos(topic) {
		end[p.Partition] = p.HighWatermark
		total += p.HighWatermark
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for int64(len(recs)) < total {
		fs := cons.PollFetches(rctx)
		require.NoError(t, rctx.Err(), "read %d of %d records", len(recs), total)
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		recs = append(recs, fs.Records()...)
	}

	// Exactly once, and per key in commit order within one partition.
	// Records of a partition arrive in offset order.
	seen := make(map[string]bool, events)
	last := make(map[string]int, keys)
	partOf := make(map[string]int32, keys)
	for _, r := range recs {
		require.Less(t, r.Offset, end[r.Partition], "a record past the high watermark")
		id := header(r, herald.HeaderID)
		require.False(t, seen[id], "event %s twice in the topic", id)
		seen[id] = true
		key := string(r.Key)
		if p, ok := partOf[key]; ok {
			require.Equal(t, p, r.Partition, "key %s in two partitions", key)
		}
		partOf[key] = r.Partition
		seq, err := strconv.Atoi(string(r.Value))
		require.NoError(t, err)
		if prev, ok := last[key]; ok {
			require.Greater(t, seq, prev, "key %s: event %d after %d in partition %d", key, seq, prev, r.Partition)
		}
		last[key] = seq
	}
	require.Len(t, seen, events, "the topic does not hold every event")
	require.Len(t, partOf, keys)
	var used int
	for _, n := range end {
		if n > 0 {
			used++
		}
	}
	require.Equal(t, partitions, used, "the keys did not spread over every partition")

	// The relays had nothing to report: no outage, no failed event.
	out := logs.String()
	require.NotContains(t, out, "destination unreachable", "a relay saw an outage")
	require.NotContains(t, out, "level=ERROR")
	t.Logf("%d events over %d keys and %d partitions; broker %d removed and added back; relay logs:\n%s",
		events, keys, partitions, down, filterLogs(out))
}

// filterLogs keeps the relays' lines above Debug about the destination.
func filterLogs(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, "destination") || strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			fmt.Fprint(&b, line)
		}
	}
	return b.String()
}
