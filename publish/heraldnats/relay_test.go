package heraldnats_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// restartableServer is an embedded JetStream server that can be stopped and
// started again on the same port and store, as a broker restart does.
type restartableServer struct {
	opts *server.Options
	srv  *server.Server
}

// startServer starts the server with the given changes to its options.
func startServer(t *testing.T, with ...func(*server.Options)) *restartableServer {
	s := &restartableServer{opts: &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	}}
	for _, f := range with {
		f(s.opts)
	}
	s.start(t)
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.stop)
	return s
}

// intakeLimits gives every stream of the server an intake queue of at most
// msgs messages and size bytes (nats-server's max_buffered_msgs and
// max_buffered_size): past them it refuses a publish with a 429.
func intakeLimits(msgs int, size int64) func(*server.Options) {
	return func(o *server.Options) {
		o.StreamMaxBufferedMsgs = msgs
		o.StreamMaxBufferedSize = size
	}
}

func (s *restartableServer) start(t *testing.T) {
	srv, err := server.NewServer(s.opts)
	require.NoError(t, err)
	srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")
	s.srv = srv
}

func (s *restartableServer) stop() {
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

// The broker goes away in the middle of a drain and comes back: every
// committed event reaches the stream once, none dies, and the relay keeps
// running throughout.
func TestRelayDeliversEverythingAcrossABrokerRestart(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	const events = 3000

	ns := startServer(t)
	nc, err := nats.Connect(ns.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	require.NoError(t, err)

	pool := testenv.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	write := func(from, to int) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		msgs := make([]herald.Message, 0, to-from)
		for i := from; i < to; i++ {
			msgs = append(msgs, herald.Message{Topic: "orders.placed", Key: fmt.Sprint(i % 10), Payload: []byte(fmt.Sprint(i))})
		}
		require.NoError(t, w.WriteTx(ctx, tx, msgs...))
		require.NoError(t, tx.Commit(ctx))
	}

	pub, err := heraldnats.New(nc, nil)
	require.NoError(t, err)
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Publisher: pub, BatchSize: 100, PollInterval: time.Millisecond,
		IdlePollInterval: 10 * time.Millisecond, OutageBackoffCap: 100 * time.Millisecond,
		PublishTimeout: 2 * time.Second, Lease: 10 * time.Second,
		Retry: herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, MaxAttempts: 3, MaxAge: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })

	write(0, 1000)
	require.Eventually(t, func() bool { return relay.Stats().Published >= 500 }, 30*time.Second, time.Millisecond)
	ns.stop()
	write(1000, 2000) // committed while the broker is down
	// Let the relay fail against the outage many times over: more failed
	// rounds than MaxAttempts would allow if outages spent attempts. Per
	// key, the first event fails and the rest wait behind it (held back):
	// 50 retries over 10 keys is 5 failures per key on average, above
	// MaxAttempts (3).
	require.Eventually(t, func() bool { return relay.Stats().Retried >= 5*10 }, 30*time.Second, time.Millisecond)
	ns.start(t)
	write(2000, events)

	require.Eventually(t, func() bool {
		info, err := stream.Info(ctx)
		return err == nil && info.State.Msgs == events
	}, 60*time.Second, 20*time.Millisecond, "the stream did not receive every event")
	require.Eventually(t, func() bool {
		var published int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE state = 'published'`).Scan(&published))
		return published == events
	}, 30*time.Second, 10*time.Millisecond)
	var dead int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+store.Table()+` WHERE state = 'dead'`).Scan(&dead))
	require.Zero(t, dead, "an outage shorter than MaxAge killed events")

	// Each event is in the stream exactly once: the count equals the number
	// of distinct event ids.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	seen := map[string]bool{}
	for len(seen) < events {
		msgs, err := cons.Fetch(500, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range msgs.Messages() {
			id := m.Headers().Get(herald.HeaderID)
			require.Equal(t, id, m.Headers().Get(jetstream.MsgIDHeader))
			require.False(t, seen[id], "event %s twice in the stream", id)
			seen[id] = true
			n++
		}
		require.NoError(t, msgs.Error())
		require.Positive(t, n, "no more messages after %d", len(seen))
	}
}
