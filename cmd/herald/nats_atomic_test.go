package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// HERALD_NATS_ATOMIC_BATCHES: the stream the relay creates allows atomic
// batches, and the events reach it in them.
func TestRelayWithNATSAtomicBatches(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload)
		SELECT 'orders.placed', 'k' || (i %% 5), convert_to('order ' || i, 'UTF8') FROM generate_series(1, 50) AS i`)

	r := start(t, map[string]string{"HERALD_PUBLISHER": ns.URL(), "HERALD_NATS_ATOMIC_BATCHES": "true"},
		append([]string{"relay", "--nats-create-stream", "ORDERS", "--nats-stream-subjects", "orders.>"}, d.flags...)...)
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 50
	}, 30*time.Second, 20*time.Millisecond, "stderr: %s", r.stderr.String())
	res := r.stop(t)
	require.Equal(t, 0, res.code, res)

	js, err := jetstream.New(ns.Conn(t))
	require.NoError(t, err)
	stream, err := js.Stream(t.Context(), "ORDERS")
	require.NoError(t, err)
	require.True(t, stream.CachedInfo().Config.AllowAtomicPublish)
	require.EqualValues(t, 50, stream.CachedInfo().State.Msgs)
	inBatch := 0
	for seq := uint64(1); seq <= 50; seq++ {
		m, err := stream.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		if m.Header.Get("Nats-Batch-Id") != "" {
			inBatch++
		}
	}
	require.Positive(t, inBatch, "no event reached the stream in an atomic batch")
}
