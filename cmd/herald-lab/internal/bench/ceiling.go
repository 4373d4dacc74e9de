package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
)

// The ceiling is the reference Herald's relay is measured against: a
// relay that claims a batch and marks it published in ONE statement, then
// publishes it. It writes each row once instead of twice and waits for no
// acknowledgement, but it is not correct: a crash between its statement
// and the broker's confirmation loses the batch, and with several workers
// a key's events are not kept in order. What Herald does beyond it is the
// price of those guarantees; the drain reports Herald's rate as a share of
// the ceiling's, measured in the same run.
const ceilingSQL = `UPDATE %[1]s o
SET state = 'published', published_at = now(), attempts = o.attempts + 1
FROM (
	SELECT id FROM %[1]s
	WHERE state = 'ready' AND available_at <= now()
	ORDER BY available_at, seq
	LIMIT $1
	FOR UPDATE SKIP LOCKED
) next
WHERE o.id = next.id
RETURNING o.id, o.seq, o.topic, o.key, o.type, o.aggregate_type, o.aggregate_id, o.payload, o.headers, o.created_at`

// drainCeiling times the ceiling draining the loaded backlog to pub, with
// as many workers as the relay has batches in flight.
func drainCeiling(ctx context.Context, e *env, name string, pub herald.Publisher) (*DrainTarget, error) {
	o := e.o
	pool, err := e.newPool(ctx, o.maxInFlight)
	if err != nil {
		return nil, err
	}
	defer e.closePool(pool)
	store := &timedStore{}
	tpub := &timedPublisher{Publisher: pub}
	var (
		published atomic.Int64
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
	)
	cpu := startCPU()
	start := time.Now()
	for range o.maxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ceilingWorker(ctx, e, pool, store, tpub, &published); err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return nil, fmt.Errorf("ceiling: %w", firstErr)
	}
	n := published.Load()
	r := &DrainTarget{
		Name: name, System: systemCeiling, Events: o.events,
		Seconds: round(elapsed.Seconds(), 3), EventsPerSec: round2(float64(n) / elapsed.Seconds()),
		Published: n, Breakdown: breakdown(store, tpub, elapsed),
	}
	r.DatabaseCPUPerEventUS, r.ProcessCPUPerEventUS = cpu.stop(n)
	return r, nil
}

// ceilingWorker claims-and-marks batches and publishes them until a claim
// finds nothing.
func ceilingWorker(ctx context.Context, e *env, pool *pgxpool.Pool, store *timedStore, pub *timedPublisher,
	published *atomic.Int64) error {
	query := fmt.Sprintf(ceilingSQL, e.outbox)
	for {
		t := time.Now()
		rows, err := pool.Query(ctx, query, e.o.batchSize)
		if err != nil {
			return err
		}
		var batch []herald.Envelope
		for rows.Next() {
			var env herald.Envelope
			if err := rows.Scan(&env.ID, &env.Seq, &env.Topic, &env.Key, &env.Type, &env.AggregateType,
				&env.AggregateID, &env.Payload, &env.Headers, &env.CreatedAt); err != nil {
				rows.Close()
				return err
			}
			env.Attempt = 1
			env.Ordered = !e.o.unordered && env.Key != ""
			batch = append(batch, env)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		store.claims.Add(1)
		store.claimNanos.Add(int64(time.Since(t)))
		slices.SortFunc(batch, func(a, b herald.Envelope) int { return cmp.Compare(a.Seq, b.Seq) })
		if err := pub.Publish(ctx, batch); err != nil {
			return fmt.Errorf("publishing: %w", err)
		}
		published.Add(int64(len(batch)))
	}
}
