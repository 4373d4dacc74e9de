package heraldkafka_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// A relay drains a backlog from PostgreSQL to kfake with the plain
// publisher and with Config.Transactional, in interleaved rounds (which
// goes first alternates), and the benchmark reports the transactional
// drain's throughput as a ratio of the plain one's: median and range
// (tx/plain, and its range in the log). Every event of every round must
// be published, once per round. The rounds are the measurement: run it
// once, go test -run XXX -bench TransactionalAgainstPlain -benchtime 1x
// ./publish/heraldkafka.
func BenchmarkTransactionalAgainstPlain(tb *testing.B) {
	t := tb
	ctx := t.Context()
	const (
		rounds  = 7
		backlog = 2000
		topic   = "bench"
	)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	require.NoError(t, err)
	t.Cleanup(cluster.Close)
	b := &bundle{cluster: cluster, addrs: cluster.ListenAddrs()}
	b.cl = b.client(t)
	plain, err := heraldkafka.New(b.cl, nil)
	require.NoError(t, err)
	txcl := b.client(t)
	tx, err := heraldkafka.New(txcl, &heraldkafka.Config{Transactional: &heraldkafka.Transactional{ID: "bench"}})
	require.NoError(t, err)
	t.Cleanup(tx.Close)

	pool := testenv.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: testenv.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	write := func() {
		for range backlog / 500 {
			tx, err := pool.Begin(ctx)
			require.NoError(t, err)
			msgs := make([]herald.Message, 500)
			for i := range msgs {
				msgs[i] = herald.Message{Topic: topic, Key: "k" + strconv.Itoa(i%100), Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
			}
			require.NoError(t, w.WriteTx(ctx, tx, msgs...))
			require.NoError(t, tx.Commit(ctx))
		}
	}
	drain := func(pub herald.Publisher) time.Duration {
		write()
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: store, Publisher: pub, Logger: slog.New(slog.DiscardHandler), BatchSize: 100, PollInterval: time.Millisecond,
			IdlePollInterval: 10 * time.Millisecond, PublishTimeout: 10 * time.Second, Lease: 30 * time.Second,
		})
		require.NoError(t, err)
		start := time.Now()
		require.NoError(t, relay.Start(ctx))
		require.Eventually(t, func() bool { return relay.Stats().Published >= backlog }, 120*time.Second, time.Millisecond)
		took := time.Since(start)
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, relay.Stop(sctx))
		require.Equal(t, int64(backlog), relay.Stats().Published, "published more than the backlog")
		return took
	}
	drain(plain) // warms PostgreSQL's caches and both clients' connections
	drain(tx)
	var ratios []float64
	for r := range rounds {
		var p, x time.Duration
		if r%2 == 0 {
			p, x = drain(plain), drain(tx)
		} else {
			x, p = drain(tx), drain(plain)
		}
		ratios = append(ratios, p.Seconds()/x.Seconds())
		t.Logf("round %d: plain %v (%.0f events/s), transactional %v (%.0f events/s)",
			r, p.Round(time.Millisecond), backlog/p.Seconds(), x.Round(time.Millisecond), backlog/x.Seconds())
	}
	tb.ReportMetric(report(t, "relay from PostgreSQL", ratios, backlog), "relay-tx/plain")

	// The publishers alone, without the database: four goroutines (the
	// relay's default MaxInFlight) publish batches of 100 events of
	// distinct keys, first attempts, the backlog split between them.
	direct := func(pub herald.Publisher) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for range backlog / 4 / 100 {
					batch := make([]herald.Envelope, 100)
					for i := range batch {
						batch[i] = keyed(topic, "k"+strconv.Itoa(i), "{}")
					}
					if err := pub.Publish(ctx, batch); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		require.NoError(t, <-errs)
		return time.Since(start)
	}
	ratios = ratios[:0]
	for r := range rounds {
		var p, x time.Duration
		if r%2 == 0 {
			p, x = direct(plain), direct(tx)
		} else {
			x, p = direct(tx), direct(plain)
		}
		ratios = append(ratios, p.Seconds()/x.Seconds())
	}
	tb.ReportMetric(report(t, "publisher alone", ratios, backlog), "publisher-tx/plain")
}

// report logs the median and range of ratios, and returns the median.
func report(t testing.TB, what string, ratios []float64, events int) float64 {
	t.Helper()
	slices.Sort(ratios)
	t.Logf("%s: transactional throughput / plain: median %.2f, range %.2f-%.2f over %d interleaved rounds of %d events",
		what, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], len(ratios), events)
	return ratios[len(ratios)/2]
}
