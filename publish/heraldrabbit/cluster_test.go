package heraldrabbit_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// Two relays drain a PostgreSQL outbox into a quorum queue of a three-node
// RabbitMQ cluster, publishing with confirms, while the queue's leader
// node is killed (a node lost: the queue elects a leader among the other
// two) and restarted, and then the node one relay is connected to is
// stopped and restarted. Each relay's destination lists the three nodes;
// a relay whose node goes away connects to another.
//
// Every event reaches the queue, each key's events in commit order. An
// event is delivered twice only if a publish of it went unanswered at a
// fault (the relay then publishes it again: RabbitMQ does not
// deduplicate), and there are at most as many duplicates as events were
// in flight. The faults cost no attempts: the relays see each as an
// outage of the destination, and say so in their logs.
func TestRelayDrainsToAQuorumQueueAcrossNodeLossAndRestarts(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	const (
		keys      = 200
		topic     = "orders.placed" // the queue: the default exchange routes by name
		batchSize = 50
		inFlight  = 2 // RelayConfig.MaxInFlight
	)
	started := time.Now()
	cluster := testenv.RabbitCluster(t, 3)
	t.Logf("cluster of 3 nodes up in %s", time.Since(started).Round(time.Millisecond))

	var urls []string
	for _, n := range cluster.Nodes {
		urls = append(urls, n.URL())
	}
	// The test's own connection, to any node that runs.
	adminDial, err := heraldrabbit.ClusterDialer(urls, amqp.Config{})
	require.NoError(t, err)
	admin := func(f func(ch *amqp.Channel) error) {
		t.Helper()
		conn, err := adminDial(ctx)
		require.NoError(t, err)
		defer conn.Close()
		ch, err := conn.Channel()
		require.NoError(t, err)
		defer ch.Close()
		require.NoError(t, f(ch))
	}
	admin(func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(topic, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err
	})

	// queueState is the queue's leader and how many of its members are
	// online, as the first running node sees them ("" and 0 when it cannot
	// tell).
	queueState := func() (leader string, online int) {
		for _, n := range cluster.Nodes {
			if !n.Running() {
				continue
			}
			// orders.placed	LEADER	[MEMBER, MEMBER, MEMBER]
			out, err := cluster.Ctl(n, "list_queues", "--no-table-headers", "name", "leader", "online")
			if err != nil {
				return "", 0
			}
			for line := range strings.Lines(out) {
				f := strings.Fields(line)
				if len(f) >= 2 && f[0] == topic {
					return f[1], strings.Count(line, "@") - 1
				}
			}
			return "", 0
		}
		return "", 0
	}
	// settled waits until the queue has a leader and all three members
	// online, and returns the leader.
	settled := func(step string) string {
		var leader string
		require.Eventually(t, func() bool {
			var online int
			leader, online = queueState()
			return cluster.Node(leader) != nil && online == 3
		}, 90*time.Second, 100*time.Millisecond, "the queue did not settle %s", step)
		return leader
	}
	oldLeader := settled("once declared")

	pool := testenv.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)

	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	// Relay 0 lists the queue's leader first, so that killing the leader
	// surely cuts its connection; relay 1 lists the nodes from another.
	leaderFirst := []string{cluster.Node(oldLeader).URL()}
	var other []string
	for _, n := range cluster.Nodes {
		if n.Name != oldLeader {
			leaderFirst = append(leaderFirst, n.URL())
			other = append(other, n.URL())
		}
	}
	lists := [][]string{leaderFirst, append(other, cluster.Node(oldLeader).URL())}
	obs := &outcomes{failed: map[string]herald.Outcome{}}
	var relays []*herald.Relay
	for i, list := range lists {
		pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
			Name: "orders", URL: strings.Join(list, ","), Logger: logger.With("relay", i),
		})
		require.NoError(t, err)
		t.Cleanup(closePub)
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: store, Publisher: pub, Logger: logger.With("relay", i), BatchSize: batchSize, MaxInFlight: inFlight,
			PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
			OutageBackoffCap: 200 * time.Millisecond, PublishTimeout: 3 * time.Second, Lease: 60 * time.Second,
			Retry:    herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 100, MaxAge: time.Hour},
			Observer: obs,
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
		tick := time.NewTicker(20 * time.Millisecond) // paces the producer; nothing waits on it
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
			msgs := make([]herald.Message, 0, 2)
			for range 2 {
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
		require.Eventually(t, func() bool { return written.Load() >= w0+200 && published() >= p0+200 },
			90*time.Second, 5*time.Millisecond, "no progress %s", step)
	}

	progress("before the faults")
	require.Equal(t, oldLeader, settled("before the faults"), "the queue's leader moved before the faults")

	// Fault 1: the leader's node is lost.
	cluster.Node(oldLeader).Kill(t)
	var newLeader string
	require.Eventually(t, func() bool {
		newLeader, _ = queueState()
		return cluster.Node(newLeader) != nil && newLeader != oldLeader
	}, 90*time.Second, 100*time.Millisecond, "no new leader after %s was killed", oldLeader)
	progress("under the new leader")
	cluster.Node(oldLeader).Start(t)
	cluster.WaitRunning(t)
	leader := settled("after the old leader came back")
	progress("after the old leader came back")

	// Fault 2: the node relay 1 is connected to is stopped.
	addr := connectedTo(t, logs.String(), 1)
	var stopped *testenv.RabbitClusterNode
	for _, n := range cluster.Nodes {
		if n.Addr == addr {
			stopped = n
		}
	}
	require.NotNil(t, stopped, "relay 1 is connected to %s, no node of the cluster", addr)
	stopped.Stop(t)
	progress("with a node stopped")
	stopped.Start(t)
	cluster.WaitRunning(t)
	settled("after the stopped node came back")
	progress("after the stopped node came back")
	stopWriter()
	require.NoError(t, werr)
	events := int(written.Load())
	what := "a follower"
	if stopped.Name == leader {
		what = "the leader"
	}
	t.Logf("%d events; leader %s killed, %s elected; relay 1's node %s (%s) stopped; %s since the cluster started",
		events, oldLeader, newLeader, stopped.Name, what, time.Since(started).Round(time.Millisecond))

	require.Eventually(t, func() bool {
		var ready int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE state <> 'published'`).Scan(&ready))
		return ready == 0
	}, 90*time.Second, 10*time.Millisecond, "the relays did not publish every event")

	// The relays spent no attempt on the faults: an event whose publish
	// was cut (its channel closed, its confirm missing at PublishTimeout)
	// is an outage, its attempt refunded. So every row was published at
	// its first counted attempt, and no event failed otherwise.
	obs.mu.Lock()
	for outcome, m := range obs.errs {
		for e, n := range m {
			t.Logf("%s x%d: %s", outcome, n, e)
		}
	}
	obs.mu.Unlock()
	var retried, maxAttempts int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE attempts > 1), coalesce(max(attempts), 0) FROM `+store.Table()).Scan(&retried, &maxAttempts))
	require.Zero(t, retried, "events spent attempts on the faults (max attempts %d)", maxAttempts)
	counts := obs.counts()
	require.Positive(t, counts[herald.OutcomeOutage], "no event failed as an outage: the faults cut nothing")
	for outcome, n := range counts {
		require.Contains(t, []herald.Outcome{herald.OutcomeOutage, herald.OutcomeHeldBack, herald.OutcomeReleased}, outcome,
			"%d events failed as %s", n, outcome)
	}
	for i, r := range relays {
		s := r.Stats()
		require.Zero(t, s.Dead, "relay %d: dead events", i)
		require.Zero(t, s.Rescued, "relay %d: rescued rows (a lease expired)", i)
		t.Logf("relay %d: %+v", i, s)
	}
	t.Logf("failed publishes by outcome: %v", counts)

	// Read the queue back: every event, each key in commit order; an event
	// twice only if a publish of it failed, as many as were in flight.
	var deliveries []amqp.Delivery
	admin(func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(topic, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		if err != nil {
			return err
		}
		require.GreaterOrEqual(t, q.Messages, events, "the queue holds fewer messages than events")
		if err := ch.Qos(500, 0, false); err != nil {
			return err
		}
		msgs, err := ch.Consume(topic, "", false, false, false, false, nil)
		if err != nil {
			return err
		}
		timeout := time.NewTimer(60 * time.Second)
		defer timeout.Stop()
		for len(deliveries) < q.Messages {
			select {
			case d, ok := <-msgs:
				require.True(t, ok, "the consumer ended after %d of %d messages", len(deliveries), q.Messages)
				deliveries = append(deliveries, d)
				require.NoError(t, d.Ack(false))
			case <-timeout.C:
				t.Fatalf("read %d of %d messages in 60s", len(deliveries), q.Messages)
			}
		}
		return nil
	})
	seen := make(map[string]int, events)
	last := make(map[string]int, keys)
	for _, d := range deliveries {
		m, err := heraldrabbit.Parse(d)
		require.NoError(t, err)
		seen[m.ID]++
		seq, err := strconv.Atoi(string(m.Payload))
		require.NoError(t, err)
		if prev, ok := last[m.Key]; ok {
			// A duplicate follows its first delivery, never a later event.
			require.GreaterOrEqual(t, seq, prev, "key %s: event %d after %d in the queue", m.Key, seq, prev)
		}
		last[m.Key] = seq
	}
	require.Len(t, seen, events, "not every event reached the queue")
	var dups int
	for id, n := range seen {
		if n > 1 {
			dups += n - 1
			require.True(t, obs.didFail(id), "event %s delivered %d times, yet no publish of it failed", id, n)
		}
	}
	// At most every event in flight at each fault, per relay, once.
	bound := 2 * len(relays) * inFlight * batchSize
	require.LessOrEqual(t, dups, bound, "duplicates")
	t.Logf("%d messages for %d events: %d duplicates (bound %d), all of events whose publish failed at a fault", len(deliveries), events, dups, bound)

	out := logs.String()
	require.Contains(t, out, "destination unreachable; pausing claims", "no relay logged the outage")
	require.Contains(t, out, "destination reachable again")
	for i := range relays {
		require.Regexp(t, `msg="connection to RabbitMQ lost" relay=`+strconv.Itoa(i), out, "relay %d's connection was cut", i)
	}
	if obs.nacked() {
		// A node that has not yet learnt of the queue's new leader nacks
		// for some seconds: the publisher says so.
		require.Contains(t, out, "level=WARN msg=\"RabbitMQ refused messages (basic.nack")
		require.Contains(t, out, "RabbitMQ takes messages again")
	}
	require.NotEqual(t, cluster.Node(oldLeader).Addr, connectedTo(t, out, 0), "relay 0 connected to another node after its node was lost")
	t.Logf("relay logs:\n%s", rabbitLogs(out))
}

// outcomes is an Observer recording the events that failed and how.
type outcomes struct {
	mu     sync.Mutex
	failed map[string]herald.Outcome // the last failure of each event
	n      map[herald.Outcome]int
	errs   map[herald.Outcome]map[string]int // errors by outcome, ids and counts blanked
}

func (o *outcomes) Acknowledged(a herald.Acknowledgement) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[herald.Outcome]int{}
	}
	if o.errs == nil {
		o.errs = map[herald.Outcome]map[string]int{}
	}
	for _, f := range a.Failed {
		o.failed[f.ID] = f.Outcome
		o.n[f.Outcome]++
		if o.errs[f.Outcome] == nil {
			o.errs[f.Outcome] = map[string]int{}
		}
		o.errs[f.Outcome][blank.ReplaceAllString(f.Error, "N")]++
	}
}

func (o *outcomes) counts() map[herald.Outcome]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[herald.Outcome]int, len(o.n))
	for k, v := range o.n {
		out[k] = v
	}
	return out
}

// nacked reports whether the broker nacked an event.
func (o *outcomes) nacked() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, m := range o.errs {
		for e := range m {
			if strings.Contains(e, "basic.nack") {
				return true
			}
		}
	}
	return false
}

// didFail reports whether a publish of event id failed.
func (o *outcomes) didFail(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.failed[id]
	return ok
}

// blank matches what differs between errors of one kind: event ids and
// counts.
var blank = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f-]{27}|\b\d+\b`)

// connectedTo returns the broker address relay i last logged connecting to.
func connectedTo(t *testing.T, logs string, i int) string {
	t.Helper()
	re := regexp.MustCompile(`msg="connected to RabbitMQ" relay=` + strconv.Itoa(i) + ` .*broker=(\S+)`)
	all := re.FindAllStringSubmatch(logs, -1)
	require.NotEmpty(t, all, "relay %d never logged a connection", i)
	return all[len(all)-1][1]
}

// rabbitLogs keeps the relays' lines about the destination and its
// connections, and their warnings and errors.
func rabbitLogs(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, "destination") || strings.Contains(line, "RabbitMQ") ||
			strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			fmt.Fprint(&b, line)
		}
	}
	return b.String()
}
