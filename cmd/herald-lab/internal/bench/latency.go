package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// seqHeader carries an event's index in the run, so that the consumer and
// the publisher wrapper find its commit time without a shared map.
const seqHeader = "Bench-Seq"

// Percentiles of a latency distribution, in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

// LatencyResult is commit-to-receive latency at a fixed rate.
type LatencyResult struct {
	// Source is where the relay took the events from: poll (claims of
	// the table) or cdc (a logical replication slot, --cdc).
	Source          string  `json:"source"`
	Rate            int     `json:"rate"`
	DurationSeconds float64 `json:"duration_seconds"`
	PollIntervalMS  float64 `json:"poll_interval_ms"`
	Producers       int     `json:"producer_goroutines"`
	Committed       int     `json:"committed"`
	Received        int     `json:"received"`
	Duplicates      int     `json:"duplicates"`
	EventsPerSec    float64 `json:"events_per_sec"`
	// CommitToReceive runs from tx.Commit returning in the producer to a
	// JetStream ordered consumer receiving the event from the stream.
	CommitToReceive Percentiles `json:"commit_to_receive"`
	// CommitToClaim runs from tx.Commit returning to the relay's claim
	// returning the event: poll wait plus the claim statement. With --cdc,
	// to the change stream's read returning it: the walsender's wait for
	// the commit to be flushed, its decoding and the stream's.
	CommitToClaim Percentiles `json:"commit_to_claim"`
	// CommitToAck runs from tx.Commit returning to the publisher's Publish
	// returning with the event's PubAck (a batch at a time).
	CommitToAck Percentiles `json:"commit_to_ack"`
	TargetP99MS float64     `json:"target_p99_ms"`
	TargetMet   bool        `json:"target_met"`
	// AtCommitLimit is --rate max: Producers goroutines committed as fast
	// as the database took them, and EventsPerSec is the rate they
	// reached.
	AtCommitLimit bool `json:"at_commit_limit,omitempty"`
	// BacklogAtEnd is how many committed events the broker had not yet
	// acknowledged when the producers stopped: what the relay had not
	// caught up with.
	BacklogAtEnd int `json:"backlog_at_end"`
	// TailMS is how long after the producers stopped the last event
	// arrived: about BacklogAtEnd over the relay's drain rate.
	TailMS float64 `json:"tail_ms"`
}

func runLatency(ctx context.Context, e *env, out io.Writer) (res *LatencyResult, failures []string, err error) {
	o := e.o
	total := int(int64(o.rate) * int64(o.duration) / int64(time.Second))
	// Enough producers that a slow commit does not hold up the schedule.
	workers := min(max(o.rate/100, 4), 32)
	if o.rate == rateMax {
		// Room for more than any database here commits in the time.
		total, workers = int(o.duration/time.Second+1)*maxCommitsPerSec, o.producers
	}
	total = max(total, 1)
	source := fmt.Sprintf("relay poll interval %s", o.pollInterval)
	if o.cdc {
		source = fmt.Sprintf("the relay reads logical replication slot %s, not the table (--cdc)", e.cdcName())
	}
	rate := fmt.Sprintf("%d events/s", o.rate)
	if o.rate == rateMax {
		rate = "as many events as the producers commit"
	}
	fmt.Fprintf(out, "\nlatency: %s for %s, one event per transaction (WriteTx), %d producer goroutines; %s\n",
		rate, o.duration, workers, source)
	res = &LatencyResult{Source: "poll", Rate: o.rate, DurationSeconds: o.duration.Seconds(), PollIntervalMS: ms(o.pollInterval),
		Producers: workers, TargetP99MS: targetLatencyP99Milli, AtCommitLimit: o.rate == rateMax}
	if err := e.truncate(ctx); err != nil {
		return res, nil, err
	}

	committed := make([]atomic.Int64, total) // unix nanos; 0 when not committed
	received := make([]atomic.Int64, total)
	acked := make([]atomic.Int64, total)
	claimed := make([]atomic.Int64, total)
	var nReceived, nDup, nAcked atomic.Int64

	// The consumer: an ordered consumer reading the stream, on its own
	// connection. The stream starts empty: an earlier run's events carry
	// the same indexes (--rounds).
	st, err := e.nats.js.Stream(ctx, latencyStream)
	if err != nil {
		return res, nil, err
	}
	if err := st.Purge(ctx); err != nil {
		return res, nil, fmt.Errorf("purging stream %s: %w", latencyStream, err)
	}
	cons, err := e.nats.js.OrderedConsumer(ctx, latencyStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return res, nil, fmt.Errorf("creating consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now().UnixNano()
		i, ok := seqOf(m.Headers().Get(seqHeader), total)
		if !ok {
			return
		}
		if received[i].CompareAndSwap(0, now) {
			nReceived.Add(1)
		} else {
			nDup.Add(1)
		}
	})
	if err != nil {
		return res, nil, fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop()

	// The relay, publishing to JetStream, on its own pool.
	relayPool, err := e.newPool(ctx, e.o.maxInFlight+4)
	if err != nil {
		return res, nil, err
	}
	defer e.closePool(relayPool)
	d, err := e.newDriver(relayPool)
	if err != nil {
		return res, nil, err
	}
	store := claimClock{Store: d, total: total, claimed: claimed}
	jsPub, err := heraldnats.New(e.nats.pub, &heraldnats.Config{Logger: e.log})
	if err != nil {
		return res, nil, err
	}
	pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		err := jsPub.Publish(ctx, batch)
		now := time.Now().UnixNano()
		var be *herald.BatchError
		isBatch := errors.As(err, &be) && len(be.Errs) == len(batch)
		for k := range batch {
			if err == nil || (isBatch && be.Errs[k] == nil) {
				if i, ok := seqOf(batch[k].Headers[seqHeader], total); ok && acked[i].CompareAndSwap(0, now) {
					nAcked.Add(1)
				}
			}
		}
		return err
	})
	cfg := &herald.RelayConfig{
		Store: store, Publisher: pub, Logger: e.log, Owner: "herald-bench-latency",
		BatchSize: o.batchSize, MaxInFlight: o.maxInFlight,
		PollInterval: o.pollInterval, IdlePollInterval: max(250*time.Millisecond, o.pollInterval),
		DeleteOnPublish: o.deleteOnPub,
	}
	if o.cdc {
		src, stopCDC, cdcErr := startLatencyCDC(ctx, e, d, total, claimed)
		if cdcErr != nil {
			return res, nil, cdcErr
		}
		defer func() { err = errors.Join(err, stopCDC()) }() // after the relay stopped
		res.Source, cfg.Store, cfg.Source = "cdc", d, src
	}
	relay, err := herald.NewRelay(cfg)
	if err != nil {
		return res, nil, err
	}
	if err := relay.Start(ctx); err != nil {
		return res, nil, fmt.Errorf("starting relay: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = relay.Stop(stopCtx)
	}()

	// The producers.
	prodPool, err := e.newPool(ctx, workers)
	if err != nil {
		return res, nil, err
	}
	defer e.closePool(prodPool)
	w, err := heraldpg.NewWriter(e.pgCfg)
	if err != nil {
		return res, nil, err
	}
	produce := func() (int, time.Duration, error) {
		return produceAtRate(ctx, e, prodPool, w, o.rate, total, workers, committed)
	}
	if o.rate == rateMax {
		produce = func() (int, time.Duration, error) {
			return produceMax(ctx, e, prodPool, w, o.duration, total, workers, committed)
		}
	}
	nCommitted, elapsed, err := produce()
	if err != nil {
		return res, nil, err
	}
	stopped := time.Now()
	res.Committed = nCommitted
	res.EventsPerSec = round2(float64(nCommitted) / elapsed.Seconds())
	res.BacklogAtEnd = nCommitted - int(nAcked.Load())

	// Wait for the tail to arrive, and for its PubAcks: the broker may
	// deliver an event to the consumer before the publisher has read the
	// PubAck of it, so the last acknowledgements can come after the last
	// event arrived. At the commit limit the relay may trail further.
	wait := 15 * time.Second
	if o.rate == rateMax {
		wait = max(wait, 4*o.duration)
	}
	deadline := time.Now().Add(wait)
	for (nReceived.Load() < int64(nCommitted) || nAcked.Load() < int64(nCommitted)) &&
		time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return res, nil, err
	}
	res.TailMS = ms(time.Since(stopped))
	res.Received, res.Duplicates = int(nReceived.Load()), int(nDup.Load())
	if res.Received != nCommitted {
		failures = append(failures, fmt.Sprintf("latency: consumer received %d of %d committed events within %s", res.Received, nCommitted, wait))
	}

	var toReceive, toClaim, toAck []time.Duration
	for i := range total {
		c := committed[i].Load()
		if c == 0 {
			continue
		}
		if r := received[i].Load(); r != 0 {
			toReceive = append(toReceive, time.Duration(r-c))
		}
		if cl := claimed[i].Load(); cl != 0 {
			toClaim = append(toClaim, time.Duration(cl-c))
		}
		if a := acked[i].Load(); a != 0 {
			toAck = append(toAck, time.Duration(a-c))
		}
	}
	res.CommitToReceive = percentiles(toReceive)
	res.CommitToClaim = percentiles(toClaim)
	res.CommitToAck = percentiles(toAck)
	res.TargetMet = res.CommitToReceive.Count > 0 && res.CommitToReceive.P99 <= targetLatencyP99Milli

	fmt.Fprintf(out, "  %d events committed, %s events/s achieved; %d received", nCommitted, fmtRate(res.EventsPerSec), res.Received)
	if res.Duplicates > 0 {
		fmt.Fprintf(out, " (+%d duplicates)", res.Duplicates)
	}
	fmt.Fprintln(out)
	fmt.Fprintf(out, "  when the producers stopped, %d events were not yet acknowledged by the broker; the last arrived %.0fms later\n",
		res.BacklogAtEnd, res.TailMS)
	p := res.CommitToReceive
	fmt.Fprintf(out, "  commit-to-receive  p50 %6.2fms  p90 %6.2fms  p99 %6.2fms  max %7.2fms   (target p99 <= %.0fms): %s\n",
		p.P50, p.P90, p.P99, p.Max, targetLatencyP99Milli, verdict(res.TargetMet))
	p = res.CommitToClaim
	claim := "commit-to-claim  "
	if o.cdc {
		claim = "commit-to-read   " // from the change stream
	}
	fmt.Fprintf(out, "  %s  p50 %6.2fms  p90 %6.2fms  p99 %6.2fms  max %7.2fms\n", claim, p.P50, p.P90, p.P99, p.Max)
	p = res.CommitToAck
	fmt.Fprintf(out, "  commit-to-PubAck   p50 %6.2fms  p90 %6.2fms  p99 %6.2fms  max %7.2fms\n", p.P50, p.P90, p.P99, p.Max)
	for _, f := range failures {
		fmt.Fprintf(out, "  VERIFICATION FAILED: %s\n", f)
	}
	return res, failures, nil
}

// LatencyRounds is several latency runs, one after the other (--rounds):
// a single run's tail moves with the machine's noise, so each percentile
// is also given as its median and range over the runs.
type LatencyRounds struct {
	Runs       []*LatencyResult `json:"runs"`
	ReceiveP50 Spread           `json:"commit_to_receive_p50_ms"`
	ReceiveP99 Spread           `json:"commit_to_receive_p99_ms"`
	AckP50     Spread           `json:"commit_to_ack_p50_ms"`
	AckP99     Spread           `json:"commit_to_ack_p99_ms"`
	// TargetMet says whether the median of the runs' commit-to-receive
	// p99 is within TargetP99MS.
	TargetP99MS float64 `json:"target_p99_ms"`
	TargetMet   bool    `json:"target_met"`
}

// runLatencyRounds runs the latency benchmark o.rounds times and prints
// the median and range of its percentiles.
func runLatencyRounds(ctx context.Context, e *env, out io.Writer) (*LatencyRounds, []string, error) {
	res := &LatencyRounds{TargetP99MS: targetLatencyP99Milli}
	var failures []string
	var recv50, recv99, ack50, ack99 []float64
	for i := range e.o.rounds {
		fmt.Fprintf(out, "\nlatency round %d of %d", i+1, e.o.rounds)
		r, f, err := runLatency(ctx, e, out)
		if r != nil {
			res.Runs = append(res.Runs, r)
		}
		failures = append(failures, f...)
		if err != nil {
			return res, failures, err
		}
		recv50, recv99 = append(recv50, r.CommitToReceive.P50), append(recv99, r.CommitToReceive.P99)
		ack50, ack99 = append(ack50, r.CommitToAck.P50), append(ack99, r.CommitToAck.P99)
	}
	res.ReceiveP50, res.ReceiveP99 = spreadOf(recv50), spreadOf(recv99)
	res.AckP50, res.AckP99 = spreadOf(ack50), spreadOf(ack99)
	res.TargetMet = res.ReceiveP99.Median <= targetLatencyP99Milli
	fmt.Fprintf(out, "\nlatency over %d rounds, median (range):\n", e.o.rounds)
	for _, l := range []struct {
		name     string
		p50, p99 Spread
	}{{"commit-to-receive", res.ReceiveP50, res.ReceiveP99}, {"commit-to-PubAck ", res.AckP50, res.AckP99}} {
		fmt.Fprintf(out, "  %s  p50 %6.2fms (%.2f-%.2f)  p99 %6.2fms (%.2f-%.2f)\n",
			l.name, l.p50.Median, l.p50.Min, l.p50.Max, l.p99.Median, l.p99.Min, l.p99.Max)
	}
	fmt.Fprintf(out, "  commit-to-receive p99 median (target <= %.0fms): %s\n", targetLatencyP99Milli, verdict(res.TargetMet))
	return res, failures, nil
}

// produceAtRate commits total events, one per transaction, at rate per
// second: a ticker releases the events that are due, and workers commit
// them. It records each commit time and returns how many committed and how
// long it took.
func produceAtRate(ctx context.Context, e *env, pool *pgxpool.Pool, w *herald.Writer[pgx.Tx],
	rate, total, workers int, committed []atomic.Int64) (int, time.Duration, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int, total)
	var (
		wg       sync.WaitGroup
		n        atomic.Int64
		errOnce  sync.Once
		firstErr error
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if runCtx.Err() != nil {
					return
				}
				err := commitOne(runCtx, e, pool, w, i)
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				committed[i].Store(time.Now().UnixNano())
				n.Add(1)
			}
		}()
	}

	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	sent := 0
	for sent < total && runCtx.Err() == nil {
		select {
		case <-tick.C:
		case <-runCtx.Done():
		}
		due := min(int(float64(time.Since(start))/float64(time.Second)*float64(rate)), total)
		for ; sent < due; sent++ {
			jobs <- sent
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	return int(n.Load()), elapsed, nil
}

// maxCommitsPerSec bounds the events a --rate max run makes room for, per
// second of --duration.
const maxCommitsPerSec = 40000

// produceMax commits events, one per transaction, from workers goroutines
// as fast as the database takes them, until d has passed or total are
// committed. It records each commit time and returns how many committed
// and how long it took.
func produceMax(ctx context.Context, e *env, pool *pgxpool.Pool, w *herald.Writer[pgx.Tx],
	d time.Duration, total, workers int, committed []atomic.Int64) (int, time.Duration, error) {
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		next, n  atomic.Int64
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	end := start.Add(d)
	for range workers {
		wg.Go(func() {
			for runCtx.Err() == nil && time.Now().Before(end) {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if err := commitOne(runCtx, e, pool, w, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				committed[i].Store(time.Now().UnixNano())
				n.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return 0, 0, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	return int(n.Load()), elapsed, nil
}

// commitOne commits event i of the run with its order, in one
// transaction.
func commitOne(ctx context.Context, e *env, pool *pgxpool.Pool, w *herald.Writer[pgx.Tx], i int) error {
	id := int64(i + 1)
	customer := "customer-" + strconv.Itoa(i%1000)
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+e.orders+` (id, customer_id, amount_cents, status) VALUES ($1, $2, $3, 'placed')`,
			id, customer, id%10000); err != nil {
			return err
		}
		return w.WriteTx(ctx, tx, herald.Message{
			Topic: latencySubject, Type: eventType, AggregateType: aggregateType, AggregateID: strconv.FormatInt(id, 10),
			Payload: payload(id, customer),
			Headers: map[string]string{"source": "herald-bench", seqHeader: strconv.Itoa(i)},
		})
	})
}

// claimClock records when the relay's claims return each event.
type claimClock struct {
	herald.Store
	total   int
	claimed []atomic.Int64
}

func (s claimClock) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	envs, err := s.Store.Claim(ctx, p)
	now := time.Now().UnixNano()
	for k := range envs {
		if i, ok := seqOf(envs[k].Headers[seqHeader], s.total); ok {
			s.claimed[i].CompareAndSwap(0, now)
		}
	}
	return envs, err
}

// ClaimsFair passes on the wrapped Store's, so that a relay on a fair
// store runs its fair lane here too (herald.FairClaims).
func (s claimClock) ClaimsFair() bool {
	f, ok := s.Store.(herald.FairClaims)
	return ok && f.ClaimsFair()
}

func seqOf(s string, total int) (int, bool) {
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && i < total
}

// percentiles uses the nearest-rank method.
func percentiles(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		k := int(math.Ceil(q*float64(len(ds)))) - 1
		return ms(ds[min(max(k, 0), len(ds)-1)])
	}
	return Percentiles{Count: len(ds), P50: at(0.50), P90: at(0.90), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}
