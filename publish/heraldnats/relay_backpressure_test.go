package heraldnats_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
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

// refusals counts the events the relays report refused with a 429, and
// the failures whose attempt was spent.
type refusals struct {
	mu    sync.Mutex
	n     int
	spent []string
}

// Acknowledged implements herald.AcknowledgedHook, the only hook it needs.
func (r *refusals) Acknowledged(a herald.Acknowledgement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range a.Failed {
		if strings.Contains(f.Error, "too many requests") {
			r.n++
		}
		if !f.Outcome.Refunded() {
			r.spent = append(r.spent, fmt.Sprintf("%s: %s", f.Outcome, f.Error))
		}
	}
}

func (r *refusals) counts() (refused int, spent []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, slices.Clone(r.spent)
}

// Relays drain keys whose events run up to the largest message the server
// takes, through a stream whose intake queue holds less than two of them,
// at the publisher's default settings: the server refuses publishes with
// 429s, and still every event reaches the stream once, each key in commit
// order, no attempt spent on a refusal.
func TestRelayKeepsKeyOrderUnderBrokerBackpressure(t *testing.T) {
	t.Parallel()
	for _, relays := range []int{1, 3} {
		t.Run(fmt.Sprintf("Relays=%d", relays), func(t *testing.T) {
			t.Parallel()
			drainUnderBackpressure(t, relays)
		})
	}
}

func drainUnderBackpressure(t *testing.T, relays int) {
	ctx := context.Background()
	const (
		keys   = 40
		perKey = 6
		// An intake queue of 4 messages, 1.5 MiB: one message at the
		// size cap fits, two do not; a round of 40 keys overflows it.
		intakeMsgs = 4
		intake     = 3 << 19
		subject    = "orders.placed"
	)
	ns := startServer(t, intakeLimits(intakeMsgs, intake))
	connect := func() *nats.Conn {
		nc, err := nats.Connect(ns.srv.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		return nc
	}
	nc := connect()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 2 * time.Minute,
	})
	require.NoError(t, err)

	pool := testenv.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)

	// Sizes from a few bytes to the largest payload the server's
	// max_payload lets through with the event's headers (-1 below).
	sizes := []int{16, 16, 16, 16, 16, 16, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, -1}
	size := func(key, i int) int {
		if n := sizes[(7*i+key)%len(sizes)]; n >= 0 {
			return n
		}
		headers := heraldnats.Message(subject, &herald.Envelope{
			Message: herald.Message{ID: herald.NewID(), Topic: subject, Key: fmt.Sprint("k", key)},
		})
		return int(nc.MaxPayload()) - heraldnats.MessageSize(headers)
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	for i := range perKey {
		for k := range keys {
			p := make([]byte, size(k, i))
			copy(p, fmt.Sprintf("%d;", i))
			require.NoError(t, w.WriteTx(ctx, tx, herald.Message{Topic: subject, Key: fmt.Sprint("k", k), Payload: p}))
		}
	}
	require.NoError(t, tx.Commit(ctx))

	var obs refusals
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	for r := range relays {
		pub, err := heraldnats.New(connect(), &heraldnats.Config{Logger: logger})
		require.NoError(t, err)
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: store, Publisher: pub, Owner: fmt.Sprint("relay-", r), Observer: &obs, BatchSize: 60, Logger: logger,
			PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond,
			OutageBackoffCap: 20 * time.Millisecond, PublishTimeout: 10 * time.Second, Lease: 30 * time.Second,
			// Two attempts: a refusal that spent one would soon kill its
			// event and park its key.
			Retry: herald.RetryPolicy{Base: time.Millisecond, Cap: 10 * time.Millisecond, MaxAttempts: 2, MaxAge: time.Hour},
		})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx))
		t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })
	}

	const events = keys * perKey
	// Until every event is published, or one died (its key is parked:
	// the rest would never be).
	var published, dead int
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'published'),
			count(*) FILTER (WHERE state = 'dead') FROM `+store.Table()).Scan(&published, &dead))
		return published == events || dead > 0
	}, 60*time.Second, 10*time.Millisecond, "the relays did not publish every event")
	refused, spent := obs.counts()
	require.Emptyf(t, spent, "%d failures spent an attempt, the first: %q", len(spent), spent[:min(len(spent), 1)])
	require.Zero(t, dead, "events died under backpressure")
	require.Positive(t, refused, "the server never refused a publish: the test did not exercise backpressure")
	t.Logf("%d publishes refused with 429", refused)

	// The stream holds every event once, each key's in commit order.
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	next := map[string]int{} // key -> index of its next event
	for n := 0; n < events; n++ {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		require.NoError(t, err, "only %d of %d events in the stream", n, events)
		key := m.Headers().Get(herald.HeaderKey)
		var i int
		_, err = fmt.Sscanf(string(m.Data()), "%d;", &i)
		require.NoError(t, err)
		require.Equal(t, next[key], i, "key %s: event %d stored where %d belongs", key, i, next[key])
		require.Equal(t, size(keyIndex(t, key), i), len(m.Data()))
		next[key]++
	}
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, events, info.State.Msgs, "an event is in the stream twice")
}

func keyIndex(t *testing.T, key string) int {
	var k int
	_, err := fmt.Sscanf(key, "k%d", &k)
	require.NoError(t, err)
	return k
}
