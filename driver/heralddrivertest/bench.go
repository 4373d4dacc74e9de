package heralddrivertest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
)

// benchRows is how many ready rows the claim benchmarks find in the table,
// ten events to a key.
const benchRows = 10_000

// BenchClaim measures Store.Claim: batches of 100 and 1000 rows, unordered
// and ordered, from a table of benchRows ready rows. Each claim's rows are
// released outside the timer, so every claim finds the table as full.
func BenchClaim(b *testing.B, h Harness) {
	for _, mode := range []struct {
		name      string
		unordered bool
	}{{"Unordered", true}, {"Ordered", false}} {
		for _, batch := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/Batch%d", mode.name, batch), func(b *testing.B) {
				o := newKit(b, h.New(b), "bench")
				o.writeKeys("t", benchRows, benchRows/10)
				ctx := b.Context()
				events := 0
				for b.Loop() {
					token := uuid.NewString()
					envs, err := o.d.Store.Claim(ctx, herald.ClaimParams{Token: token, Owner: o.owner,
						Limit: batch, Lease: time.Minute, Unordered: mode.unordered})
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if len(envs) < batch/2 {
						b.Fatalf("a claim of %d took %d rows of %d ready", batch, len(envs), benchRows)
					}
					events += len(envs)
					benchRelease(b, o, token, envs)
					b.StartTimer()
				}
				reportEvents(b, events)
			})
		}
	}
}

func benchRelease(b *testing.B, o *Kit, token string, envs []herald.Envelope) {
	res, err := o.d.Store.Complete(b.Context(), herald.CompleteParams{Token: token, Failed: released(envIDs(envs)...)})
	if err != nil || len(res.Failed) != len(envs) {
		b.Fatalf("releasing %d rows: %d released, %v", len(envs), len(res.Failed), err)
	}
}

// BenchComplete measures Store.Complete of a claimed batch of 100 and 1000
// rows: all published, and with one event in ten failed (retried, paused
// by an outage or dead, in turn), each with the published rows kept and
// deleted (CompleteParams.Delete). Each batch is written and claimed
// outside the timer.
func BenchComplete(b *testing.B, h Harness) {
	outcomes := []herald.Outcome{herald.OutcomeRetry, herald.OutcomeOutage, herald.OutcomeDead}
	for _, mode := range []struct {
		name      string
		failEvery int
		delete    bool
	}{{"AllPublished", 0, false}, {"AllPublishedDeleted", 0, true}, {"WithFailures", 10, false}, {"WithFailuresDeleted", 10, true}} {
		for _, batch := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/Batch%d", mode.name, batch), func(b *testing.B) {
				o := newKit(b, h.New(b), "bench")
				ctx := b.Context()
				events := 0
				for b.Loop() {
					b.StopTimer()
					o.WriteN("t", batch)
					token := uuid.NewString()
					envs, err := o.d.Store.Claim(ctx, herald.ClaimParams{Token: token, Owner: o.owner,
						Limit: batch, Lease: time.Minute, Unordered: true})
					if err != nil || len(envs) != batch {
						b.Fatalf("claiming %d rows: got %d, %v", batch, len(envs), err)
					}
					p := herald.CompleteParams{Token: token, Published: make([]string, 0, batch), Delete: mode.delete}
					for i, e := range envs {
						if mode.failEvery == 0 || i%mode.failEvery != 0 {
							p.Published = append(p.Published, e.ID)
							continue
						}
						// Delays of an hour keep the failed rows out of
						// the next claims.
						out := outcomes[(i/mode.failEvery)%len(outcomes)]
						p.Failed = append(p.Failed, herald.Failure{ID: e.ID, Outcome: out,
							Error: "broker said no", Delay: time.Hour})
					}
					b.StartTimer()
					res, err := o.d.Store.Complete(ctx, p)
					if err != nil {
						b.Fatal(err)
					}
					if res.Published != len(p.Published) || len(res.Failed) != len(p.Failed) {
						b.Fatalf("completed %d published and %d failed of %d and %d",
							res.Published, len(res.Failed), len(p.Published), len(p.Failed))
					}
					events += batch
				}
				reportEvents(b, events)
			})
		}
	}
}

// BenchRelayDrain measures one relay draining a backlog of 20,000 events to
// a publisher that discards them (BatchSize 1000, MaxInFlight 4), until the
// last batch is acknowledged: keeping the published rows (Keep) and
// deleting them (DeleteOnPublish); and, for a driver with a Ceiling, four
// workers draining the same backlog with it (Ceiling), the reference the
// relay's rate is a share of.
func BenchRelayDrain(b *testing.B, h Harness) {
	b.Run("Keep", func(b *testing.B) { benchRelayDrain(b, h, false) })
	b.Run("DeleteOnPublish", func(b *testing.B) { benchRelayDrain(b, h, true) })
	b.Run("Ceiling", func(b *testing.B) { benchCeilingDrain(b, h) })
}

// benchCeilingDrain drains drainEvents with the driver's Ceiling: as many
// workers as the relay has batches in flight, each claiming-and-marking
// a batch, then publishing it to a discarding publisher, until a claim
// finds nothing.
func benchCeilingDrain(b *testing.B, h Harness) {
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		o := newKit(b, h.New(b), "bench")
		if o.d.Ceiling == nil {
			b.Skipf("%s has no ceiling", h.Name)
		}
		o.WriteN("t", drainEvents)
		pub := herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil })
		var (
			wg        sync.WaitGroup
			published atomic.Int64
			errs      = make([]error, drainWorkers)
		)
		b.StartTimer()
		start := time.Now()
		for i := range drainWorkers {
			wg.Go(func() {
				for {
					batch, err := o.d.Ceiling(context.Background(), drainBatch)
					if err == nil && len(batch) > 0 {
						err = pub.Publish(context.Background(), batch)
					}
					if err != nil || len(batch) == 0 {
						errs[i] = err
						return
					}
					published.Add(int64(len(batch)))
				}
			})
		}
		wg.Wait()
		elapsed += time.Since(start)
		b.StopTimer()
		if err := errors.Join(errs...); err != nil {
			b.Fatal(err)
		}
		want := map[string]int64{"t/published": drainEvents}
		if got := o.Counts(); published.Load() != drainEvents || !maps.Equal(got, want) {
			b.Fatalf("the ceiling published %d, and the table holds %v, want %d and %v", published.Load(), got, drainEvents, want)
		}
	}
	b.ReportMetric(float64(drainEvents*b.N)/elapsed.Seconds(), "events/s")
}

// The drain benchmarks' backlog, batch size and batches in flight (the
// relay's default MaxInFlight).
const (
	drainEvents  = 20_000
	drainBatch   = 1000
	drainWorkers = 4
)

func benchRelayDrain(b *testing.B, h Harness, deleteOnPublish bool) {
	const n = drainEvents
	var elapsed time.Duration
	for range b.N {
		b.StopTimer()
		o := newKit(b, h.New(b), "bench")
		o.WriteN("t", n)
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
			Store: o.d.Store, Publisher: pub, BatchSize: drainBatch, MaxInFlight: drainWorkers, Logger: slog.New(slog.DiscardHandler),
			DeleteOnPublish: deleteOnPublish,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := r.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		<-done
		// Drained means acknowledged: the last batch's Complete is part of it.
		if err := r.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		b.StopTimer()
		want := map[string]int64{"t/published": n}
		if deleteOnPublish {
			want = map[string]int64{}
		}
		if got := o.Counts(); !maps.Equal(got, want) {
			b.Fatalf("after the drain the table holds %v, want %v", got, want)
		}
	}
	b.ReportMetric(float64(n*b.N)/elapsed.Seconds(), "events/s")
}

func reportEvents(b *testing.B, events int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(events)/s, "events/s")
	}
}
