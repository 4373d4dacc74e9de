package heraldnats_test

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// Two relays drain a PostgreSQL outbox into an R3 stream of a three-node
// JetStream cluster while the stream's leader is shut down (an election),
// restarted, and then a follower is shut down and restarted. Every event
// reaches the stream exactly once, each key's events in commit order, and
// the election costs no attempts: the relays see it as an outage.
func TestRelayDrainsToAClusterAcrossLeaderAndFollowerRestarts(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	const keys = 300

	cluster := testenv.NATSCluster(t, 3)
	connect := func(urls string, opts ...nats.Option) *nats.Conn {
		opts = append(opts, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
		nc, err := nats.Connect(urls, opts...)
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	js, err := jetstream.New(connect(cluster.URLs()))
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage,
		Replicas: 3, Duplicates: 5 * time.Minute,
	})
	require.NoError(t, err)
	info := func() *jetstream.StreamInfo {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		i, err := stream.Info(ctx)
		if err != nil || i.Cluster == nil {
			return nil
		}
		return i
	}
	// settled: the stream has a leader and every replica is current.
	settled := func() (string, bool) {
		i := info()
		if i == nil || i.Cluster.Leader == "" || len(i.Cluster.Replicas) != 2 {
			return "", false
		}
		for _, r := range i.Cluster.Replicas {
			if !r.Current || r.Offline {
				return "", false
			}
		}
		return i.Cluster.Leader, true
	}
	// waitSettled waits until the stream is settled and returns its leader.
	waitSettled := func(step string) string {
		var leader string
		require.Eventually(t, func() bool {
			var ok bool
			leader, ok = settled()
			return ok
		}, 60*time.Second, 20*time.Millisecond, "the stream did not settle %s", step)
		return leader
	}
	oldLeader := waitSettled("once created")

	pool := testenv.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)

	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Relay 0 is connected to the stream leader (its list of every node
	// starts there, in that order), so that stopping the leader surely
	// cuts one relay's connection; relay 1 picks a node at random, as
	// clients do by default.
	leaderFirst := []string{cluster.Server(oldLeader).URL()}
	for i := range 3 {
		if cluster.Name(i) != oldLeader {
			leaderFirst = append(leaderFirst, cluster.Servers[i].URL())
		}
	}
	conns := []*nats.Conn{
		connect(strings.Join(leaderFirst, ","), nats.DontRandomize()),
		connect(cluster.URLs()),
	}
	var relays []*herald.Relay
	for i, nc := range conns {
		pub, err := heraldnats.New(nc, nil)
		require.NoError(t, err)
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: store, Publisher: pub, Logger: logger.With("relay", i), BatchSize: 100,
			PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
			OutageBackoffCap: 200 * time.Millisecond, PublishTimeout: 2 * time.Second, Lease: 30 * time.Second,
			Retry: herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 100, MaxAge: time.Hour},
		})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx))
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
				msgs = append(msgs, herald.Message{Topic: "orders.placed", Key: strconv.Itoa(i % keys), Payload: []byte(strconv.Itoa(i))})
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
		require.Eventually(t, func() bool { return written.Load() >= w0+500 && published() >= p0+500 },
			60*time.Second, 5*time.Millisecond, "no progress %s", step)
	}

	progress("before the faults")
	require.Equal(t, oldLeader, waitSettled("before the faults"), "the stream leader moved before the faults")
	cluster.Server(oldLeader).Stop()
	var newLeader string
	require.Eventually(t, func() bool {
		i := info()
		if i == nil {
			return false
		}
		newLeader = i.Cluster.Leader
		return newLeader != "" && newLeader != oldLeader
	}, 60*time.Second, 20*time.Millisecond, "no new stream leader after %s stopped", oldLeader)
	progress("under the new leader")
	cluster.Server(oldLeader).Restart(t)
	cluster.WaitReady(t)
	leader := waitSettled("after the old leader came back")
	progress("after the old leader came back")

	// The follower to stop is relay 1's server when that is not the
	// leader, so that this fault too cuts a relay's connection.
	follower := conns[1].ConnectedServerName()
	if follower == leader || follower == "" {
		for i := range 3 {
			if name := cluster.Name(i); name != leader {
				follower = name
				break
			}
		}
	}
	cluster.Server(follower).Stop()
	progress("with a follower down")
	cluster.Server(follower).Restart(t)
	cluster.WaitReady(t)
	waitSettled("after the follower came back")
	progress("after the follower came back")
	stopWriter()
	require.NoError(t, werr)
	events := int(written.Load())
	t.Logf("%d events; stream leader %s, then %s; follower %s restarted", events, oldLeader, newLeader, follower)

	require.Eventually(t, func() bool {
		var ready int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE state <> 'published'`).Scan(&ready))
		return ready == 0
	}, 60*time.Second, 10*time.Millisecond, "the relays did not publish every event")

	// The relays spent no attempt on the faults. An event whose publish
	// was cut by the election or by its relay's server going away is an
	// outage (a lost connection, a PubAck missing at PublishTimeout, a
	// 503): its attempt is refunded. So every row was published at its
	// first counted attempt.
	var retried, maxAttempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempts > 1), coalesce(max(attempts), 0) FROM `+store.Table()).Scan(&retried, &maxAttempts))
	require.Zero(t, retried, "events spent attempts on the faults (max attempts %d)", maxAttempts)
	for _, r := range relays {
		s := r.Stats()
		require.Zero(t, s.Dead, "dead events")
	}

	// Exactly once and in commit order per key: read the whole stream.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	seen := make(map[string]bool, events)
	last := make(map[string]int, keys)
	for len(seen) < events {
		msgs, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range msgs.Messages() {
			n++
			id := m.Headers().Get(herald.HeaderID)
			require.Equal(t, id, m.Headers().Get(jetstream.MsgIDHeader))
			require.False(t, seen[id], "event %s twice in the stream", id)
			seen[id] = true
			key := m.Headers().Get(herald.HeaderKey)
			seq, err := strconv.Atoi(string(m.Data()))
			require.NoError(t, err)
			if prev, ok := last[key]; ok {
				require.Greater(t, seq, prev, "key %s: event %d after %d in the stream", key, seq, prev)
			}
			last[key] = seq
		}
		require.NoError(t, msgs.Error())
		require.Positive(t, n, "the stream ends after %d of %d events", len(seen), events)
	}
	i := info()
	require.NotNil(t, i)
	require.Equal(t, uint64(events), i.State.Msgs, "the stream holds other messages than the events")

	out := logs.String()
	require.Contains(t, out, "destination unreachable; pausing claims", "no relay logged the outage")
	require.Contains(t, out, "destination reachable again")
	t.Logf("relay logs:\n%s", filterLogs(out))
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
