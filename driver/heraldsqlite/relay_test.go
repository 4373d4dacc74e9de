package heraldsqlite_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

func TestRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TwoRelaysOnOneFilePublishEveryEventExactlyOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := newRecorder()
		// Two relays as two processes would run them: each with its own
		// *sql.DB on the file. They start before the writes, so claims,
		// acknowledgements and producer commits contend for the lock.
		for i := range 2 {
			d, err := heraldsqlite.New(open(t, b.path), nil)
			require.NoError(t, err)
			startRelay(t, d, rec.publisher(), func(c *herald.RelayConfig) {
				c.Owner = fmt.Sprintf("relay-%d", i)
			})
		}
		var (
			mu  sync.Mutex
			ids []string
			wg  sync.WaitGroup
		)
		for range 4 { // four producers, five transactions of 100 events each
			wg.Go(func() {
				for range 5 {
					got := b.writeN(t, "orders", 100, 100)
					mu.Lock()
					ids = append(ids, got...)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.Len(t, ids, 2000)
		requireAllDeliveredOnce(t, rec, ids)
		distinct, dups := rec.total()
		require.Equal(t, 2000, distinct)
		require.Zero(t, dups)
		require.Eventually(t, func() bool { return b.count(t, "state = 'published'") == 2000 }, 10*time.Second, 5*time.Millisecond)
		require.Zero(t, b.count(t, "attempts <> 1"), "no event was claimed twice")
	})

	t.Run("RolledBackEventsAreNeverPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ghosts []string
		for i := range 60 {
			tx, err := b.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			id := herald.NewID()
			require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{ID: id, Topic: "t"}))
			if i%3 == 0 {
				ghosts = append(ghosts, id)
				require.NoError(t, tx.Rollback())
			} else {
				require.NoError(t, tx.Commit())
			}
		}
		// Written last: once it is delivered, every earlier commit was
		// claimed too (one relay, one batch at a time, claims in order).
		marker := b.write(t, herald.Message{Topic: "t"})
		rec := newRecorder()
		startRelay(t, b.driver, rec.publisher(), func(c *herald.RelayConfig) { c.MaxInFlight = 1 })
		requireAllDeliveredOnce(t, rec, marker)
		distinct, dups := rec.total()
		require.Equal(t, 60-len(ghosts)+1, distinct)
		require.Zero(t, dups)
		for _, id := range ghosts {
			require.Zero(t, rec.count(id), "ghost %s from a rolled-back transaction was published", id)
		}
	})

	t.Run("PlainSQLRowsAreRelayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO herald_outbox (topic, key, payload) VALUES ('orders', 'order-42', '{"total":4200}')`)
		var id string
		require.NoError(t, b.db.QueryRow(`SELECT id FROM herald_outbox`).Scan(&id))
		rec := newRecorder()
		startRelay(t, b.driver, rec.publisher(), nil)
		requireAllDeliveredOnce(t, rec, []string{id})
		rec.mu.Lock()
		defer rec.mu.Unlock()
		require.Equal(t, []byte(`{"total":4200}`), rec.envs[id].Payload)
		require.Equal(t, "order-42", rec.envs[id].Key)
	})
}

// BenchmarkRelayDrain measures one relay draining a backlog of 20,000
// events to a publisher that discards them (BatchSize 1000, MaxInFlight 4).
func BenchmarkRelayDrain(b *testing.B) {
	const n = 20000
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		bu := setup(b)
		bu.writeN(b, "t", n, 1000)
		var (
			mu   sync.Mutex
			seen int
			done = make(chan struct{})
		)
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			if seen += len(batch); seen == n {
				close(done)
			}
			return nil
		})
		r, err := herald.NewRelay(&herald.RelayConfig{
			Store: bu.driver, Publisher: pub, BatchSize: 1000, Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(b, err)
		b.StartTimer()
		start := time.Now()
		require.NoError(b, r.Start(context.Background()))
		<-done
		// Drained means acknowledged: the last batch's Complete is part of it.
		require.NoError(b, r.Stop(context.Background()))
		elapsed += time.Since(start)
		b.StopTimer()
		require.Equal(b, n, bu.count(b, "state = 'published'"))
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "events/s")
}
