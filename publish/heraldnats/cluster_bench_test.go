package heraldnats_test

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
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

// BenchmarkDrainToAClusterAgainstOneNode: a relay at its default settings
// drains the same backlog from PostgreSQL into an R3 stream of a
// three-node JetStream cluster and into an R1 stream of one node, in
// interleaved rounds (which goes first alternates), all servers on this
// machine. It reports the cluster's drain rate as a share of the single
// node's, median (cluster/one-node) and range (in the log). The rounds
// are the measurement: go test -run XXX -bench DrainToAClusterAgainstOneNode
// -benchtime 1x ./publish/heraldnats
func BenchmarkDrainToAClusterAgainstOneNode(b *testing.B) {
	const (
		rounds  = 5
		backlog = 20000
		keys    = 1000
	)
	ctx := context.Background()
	cfg := jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage,
		Duplicates: 2 * time.Minute}

	cluster := testenv.NATSCluster(b, 3)
	nc, err := nats.Connect(cluster.URLs(), nats.MaxReconnects(-1))
	require.NoError(b, err)
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(b, err)
	clustered := cfg
	clustered.Replicas = 3
	stream3, err := js.CreateStream(ctx, clustered)
	require.NoError(b, err)

	one := testenv.NATS(b)
	stream1 := one.CreateStreamConfig(b, cfg)
	oneConn := one.Conn(b)

	pool := testenv.PostgresPool(b)
	pgCfg := &heraldpg.Config{Schema: testenv.Schema(b)}
	store, err := heraldpg.New(pool, pgCfg)
	require.NoError(b, err)
	require.NoError(b, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(pgCfg)
	require.NoError(b, err)

	drain := func(conn *nats.Conn, stream jetstream.Stream) time.Duration {
		require.NoError(b, stream.Purge(ctx))
		for start := 0; start < backlog; start += 1000 {
			tx, err := pool.Begin(ctx)
			require.NoError(b, err)
			msgs := make([]herald.Message, 1000)
			for i := range msgs {
				n := start + i
				msgs[i] = herald.Message{Topic: "orders.placed", Key: "customer-" + strconv.Itoa(n%keys),
					Payload: []byte(`{"order":` + strconv.Itoa(n) + `}`)}
			}
			require.NoError(b, w.WriteTx(ctx, tx, msgs...))
			require.NoError(b, tx.Commit(ctx))
		}
		pub, err := heraldnats.New(conn, nil)
		require.NoError(b, err)
		relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub,
			Logger: slog.New(slog.DiscardHandler)})
		require.NoError(b, err)
		start := time.Now()
		require.NoError(b, relay.Start(ctx))
		require.Eventually(b, func() bool { return relay.Stats().Published >= backlog }, 5*time.Minute, time.Millisecond)
		took := time.Since(start)
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(b, relay.Stop(stopCtx))
		info, err := stream.Info(ctx)
		require.NoError(b, err)
		require.EqualValues(b, backlog, info.State.Msgs, "the stream holds the backlog once")
		return took
	}
	drain(oneConn, stream1) // warms PostgreSQL's caches and both connections
	drain(nc, stream3)
	var ratios []float64
	for r := range rounds {
		var single, three time.Duration
		if r%2 == 0 {
			single, three = drain(oneConn, stream1), drain(nc, stream3)
		} else {
			three, single = drain(nc, stream3), drain(oneConn, stream1)
		}
		ratios = append(ratios, single.Seconds()/three.Seconds())
		b.Logf("round %d: one node %.0f events/s, R3 cluster %.0f events/s", r+1,
			backlog/single.Seconds(), backlog/three.Seconds())
	}
	slices.Sort(ratios)
	b.Logf("R3 cluster / one node: median %.2f, range %.2f-%.2f over %d interleaved rounds of %d events",
		ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], rounds, backlog)
	b.ReportMetric(ratios[len(ratios)/2], "cluster/one-node")
}
