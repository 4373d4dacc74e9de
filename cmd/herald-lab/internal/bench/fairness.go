package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// The fairness benchmark (heraldpg's Config.FairBy): one tenant's backlog
// and a trickle of events of other tenants, through JetStream.
const (
	fairStream  = "HERALD_BENCH_FAIR"
	fairSubject = "herald.bench.fair"
	// The most seconds one fairness run waits for the backlog to drain.
	fairMaxSeconds = 900
	// Targets from the issue: the trickle's p99 with fairness on within
	// 3x of its p99 with no backlog; the backlog's drain rate with
	// fairness on at least 0.8 of its rate without.
	targetFairP99Ratio   = 3.0
	targetFairDrainRatio = 0.8
)

// FairnessRun is one run: the trickle alone (quiet), or beside the
// backlog with fairness on (fair) or off (unfair).
type FairnessRun struct {
	Mode string `json:"mode"` // quiet, fair or unfair
	// TrickleCommitToReceive is from a trickle event's commit to a
	// consumer of the stream receiving it (commit to broker: the broker
	// stored it and delivers it); the consumer reads the trickle's
	// subjects only, so that it never queues behind the backlog.
	TrickleCommitToReceive Percentiles `json:"trickle_commit_to_receive"`
	// TrickleCommitToClaim is from the commit to the relay's claim
	// returning the event: the wait for a claim to start after the commit
	// (one that started before misses it), and the claim's statements.
	TrickleCommitToClaim Percentiles `json:"trickle_commit_to_claim"`
	// TrickleCommitToAck is from the commit to the relay's publish call
	// of its batch returning, every event of the batch acknowledged.
	TrickleCommitToAck Percentiles `json:"trickle_commit_to_ack"`
	TrickleCommitted   int         `json:"trickle_committed"`
	// DrainPerSec is the backlog's events over the time from the relay's
	// start to the backlog's last PubAck; 0 for quiet.
	DrainPerSec  float64 `json:"drain_per_sec,omitempty"`
	DrainSeconds float64 `json:"drain_seconds,omitempty"`
}

// FairnessResult is every run of `herald-lab bench fairness`, and the
// ratios of each round against references of the same round.
type FairnessResult struct {
	FairBy      string         `json:"fair_by"`
	Backlog     int            `json:"backlog"`
	BacklogKeys int            `json:"backlog_keys"`
	Tenants     int            `json:"tenants"`
	TrickleRate int            `json:"trickle_rate"`
	Runs        []*FairnessRun `json:"runs"`
	// Per round: the trickle's p99 with fairness on over its p99 with no
	// backlog, and the backlog's drain rate with fairness on over its rate
	// with fairness off.
	P99Ratio   Spread `json:"p99_ratio_fair_over_quiet"`
	DrainRatio Spread `json:"drain_ratio_fair_over_unfair"`
	QuietP99   Spread `json:"quiet_p99_ms"`
	FairP99    Spread `json:"fair_p99_ms"`
	UnfairP99  Spread `json:"unfair_p99_ms"`
	FairDrain  Spread `json:"fair_drain_per_sec"`
	UnfairDrn  Spread `json:"unfair_drain_per_sec"`
	P99Met     bool   `json:"p99_target_met"`
	DrainMet   bool   `json:"drain_target_met"`
}

// runFairness runs o.rounds rounds of the three runs, in an order rotated
// each round, and prints each and the ratios' medians and ranges.
func runFairness(ctx context.Context, e *env, out io.Writer) (*FairnessResult, []string, error) {
	o := e.o
	res := &FairnessResult{FairBy: o.fairBy, Backlog: o.backlog, BacklogKeys: o.backlogKeys, Tenants: o.tenants, TrickleRate: o.trickleRate}
	fmt.Fprintf(out, "\nfairness: a backlog of %d events over %d keys for one tenant, and %d events/s spread over %d other tenants; "+
		"relay batch %d, %d in flight, fair by %s; %d rounds\n",
		o.backlog, o.backlogKeys, o.trickleRate, o.tenants, o.batchSize, o.maxInFlight, o.fairBy, o.rounds)
	if _, err := e.nats.js.CreateStream(ctx, jetstream.StreamConfig{Name: fairStream, Subjects: []string{fairSubject + ".>"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return res, nil, fmt.Errorf("nats: creating stream %s: %w", fairStream, err)
	}
	var failures []string
	var p99r, drainr, quiet, fair, unfair, fairD, unfairD []float64
	modes := []string{"quiet", "fair", "unfair"}
	for round := range o.rounds {
		got := map[string]*FairnessRun{}
		for k := range modes {
			mode := modes[(k+round)%len(modes)]
			r, f, err := runFairOnce(ctx, e, mode, out)
			failures = append(failures, f...)
			if err != nil {
				return res, failures, fmt.Errorf("round %d, %s: %w", round+1, mode, err)
			}
			res.Runs = append(res.Runs, r)
			got[mode] = r
		}
		q, f, u := got["quiet"], got["fair"], got["unfair"]
		quiet = append(quiet, q.TrickleCommitToReceive.P99)
		fair, unfair = append(fair, f.TrickleCommitToReceive.P99), append(unfair, u.TrickleCommitToReceive.P99)
		fairD, unfairD = append(fairD, f.DrainPerSec), append(unfairD, u.DrainPerSec)
		if q.TrickleCommitToReceive.P99 > 0 {
			p99r = append(p99r, round2(f.TrickleCommitToReceive.P99/q.TrickleCommitToReceive.P99))
		}
		if u.DrainPerSec > 0 {
			drainr = append(drainr, round2(f.DrainPerSec/u.DrainPerSec))
		}
	}
	res.P99Ratio, res.DrainRatio = spreadOf(p99r), spreadOf(drainr)
	res.QuietP99, res.FairP99, res.UnfairP99 = spreadOf(quiet), spreadOf(fair), spreadOf(unfair)
	res.FairDrain, res.UnfairDrn = spreadOf(fairD), spreadOf(unfairD)
	res.P99Met = len(p99r) > 0 && res.P99Ratio.Median <= targetFairP99Ratio
	res.DrainMet = len(drainr) > 0 && res.DrainRatio.Median >= targetFairDrainRatio
	fmt.Fprintf(out, "\nfairness over %d rounds, median (range):\n", o.rounds)
	fmt.Fprintf(out, "  trickle p99 commit-to-receive: no backlog %.2fms (%.2f-%.2f), backlog with fairness %.2fms (%.2f-%.2f), "+
		"backlog without %.0fms (%.0f-%.0f)\n", res.QuietP99.Median, res.QuietP99.Min, res.QuietP99.Max,
		res.FairP99.Median, res.FairP99.Min, res.FairP99.Max, res.UnfairP99.Median, res.UnfairP99.Min, res.UnfairP99.Max)
	fmt.Fprintf(out, "  backlog drain: with fairness %s events/s (%s-%s), without %s events/s (%s-%s)\n",
		fmtRate(res.FairDrain.Median), fmtRate(res.FairDrain.Min), fmtRate(res.FairDrain.Max),
		fmtRate(res.UnfairDrn.Median), fmtRate(res.UnfairDrn.Min), fmtRate(res.UnfairDrn.Max))
	fmt.Fprintf(out, "  trickle p99, fairness on over no backlog: %.2fx (%.2f-%.2f) (target <= %.0fx): %s\n",
		res.P99Ratio.Median, res.P99Ratio.Min, res.P99Ratio.Max, targetFairP99Ratio, verdict(res.P99Met))
	fmt.Fprintf(out, "  backlog drain rate, fairness on over off: %.2f (%.2f-%.2f) (target >= %.1f): %s\n",
		res.DrainRatio.Median, res.DrainRatio.Min, res.DrainRatio.Max, targetFairDrainRatio, verdict(res.DrainMet))
	return res, failures, nil
}

// runFairOnce is one run of mode: the table emptied, the backlog written
// (not for quiet) and vacuumed, the fairness index made for fair and
// dropped otherwise, then the relay and the trickle started together.
// The trickle runs for --duration (quiet) or until the backlog drained.
func runFairOnce(ctx context.Context, e *env, mode string, out io.Writer) (*FairnessRun, []string, error) {
	o := e.o
	res := &FairnessRun{Mode: mode}
	if err := e.truncate(ctx); err != nil {
		return res, nil, err
	}
	cfg := *e.pgCfg
	cfg.FairBy = o.fairBy
	fairDriver, err := heraldpg.New(e.admin, &cfg)
	if err != nil {
		return res, nil, err
	}
	if err := dropFairIndexes(ctx, e); err != nil {
		return res, nil, err
	}
	backlog := 0
	if mode != "quiet" {
		backlog = o.backlog
		topic, headers := fairSubject+".big", `jsonb_build_object('tenant', 'big')`
		if o.fairBy == "topic" {
			headers = `'{}'::jsonb`
		}
		if _, err := e.admin.Exec(ctx, `INSERT INTO `+e.outbox+` (topic, key, payload, headers)
			SELECT $1, 'big-' || (g % $2), convert_to(repeat('x', $3), 'UTF8'), `+headers+`
			FROM generate_series(1, $4) g`, topic, o.backlogKeys, o.payloadBytes, backlog); err != nil {
			return res, nil, fmt.Errorf("writing the backlog: %w", err)
		}
	}
	if mode == "fair" {
		if err := fairDriver.Migrate(ctx); err != nil {
			return res, nil, err
		}
	}
	if _, err := e.admin.Exec(ctx, `VACUUM ANALYZE `+e.outbox); err != nil {
		return res, nil, fmt.Errorf("vacuuming: %w", err)
	}
	e.checkpoint(ctx)
	st, err := e.nats.js.Stream(ctx, fairStream)
	if err != nil {
		return res, nil, err
	}
	if err := st.Purge(ctx); err != nil {
		return res, nil, fmt.Errorf("purging stream %s: %w", fairStream, err)
	}

	maxTrickle := o.trickleRate*fairMaxSeconds + 1
	committed := make([]atomic.Int64, maxTrickle)
	acked := make([]atomic.Int64, maxTrickle)
	received := make([]atomic.Int64, maxTrickle)
	claimed := make([]atomic.Int64, maxTrickle)
	var nAcked, nReceived, backlogAcked, lastBacklogAck atomic.Int64

	cons, err := e.nats.js.OrderedConsumer(ctx, fairStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{fairSubject + ".trickle.>"}})
	if err != nil {
		return res, nil, fmt.Errorf("creating consumer: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now().UnixNano()
		if i, ok := seqOf(m.Headers().Get(seqHeader), maxTrickle); ok && received[i].CompareAndSwap(0, now) {
			nReceived.Add(1)
		}
	})
	if err != nil {
		return res, nil, fmt.Errorf("consuming: %w", err)
	}
	defer cc.Stop()

	relayPool, err := e.newPool(ctx, o.maxInFlight+4)
	if err != nil {
		return res, nil, err
	}
	defer e.closePool(relayPool)
	relayCfg := *e.pgCfg
	if mode == "fair" {
		relayCfg.FairBy = o.fairBy
	}
	d, err := heraldpg.New(relayPool, &relayCfg)
	if err != nil {
		return res, nil, err
	}
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
			if err != nil && (!isBatch || be.Errs[k] != nil) {
				continue
			}
			if s, ok := batch[k].Headers[seqHeader]; ok {
				if i, ok := seqOf(s, maxTrickle); ok && acked[i].CompareAndSwap(0, now) {
					nAcked.Add(1)
				}
			} else {
				backlogAcked.Add(1)
				lastBacklogAck.Store(now)
			}
		}
		return err
	})
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: claimClock{Store: d, total: maxTrickle, claimed: claimed}, Publisher: pub, Logger: e.log, Owner: "herald-bench-fairness",
		BatchSize: o.batchSize, MaxInFlight: o.maxInFlight,
		PollInterval: o.pollInterval, IdlePollInterval: max(250*time.Millisecond, o.pollInterval),
	})
	if err != nil {
		return res, nil, err
	}
	prodPool, err := e.newPool(ctx, 4)
	if err != nil {
		return res, nil, err
	}
	defer e.closePool(prodPool)
	w, err := heraldpg.NewWriter(e.pgCfg)
	if err != nil {
		return res, nil, err
	}

	start := time.Now()
	if err := relay.Start(ctx); err != nil {
		return res, nil, fmt.Errorf("starting relay: %w", err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = relay.Stop(stopCtx)
	}()
	stop := make(chan struct{})
	var (
		nCommitted int
		prodErr    error
		prodDone   = make(chan struct{})
	)
	go func() {
		defer close(prodDone)
		nCommitted, prodErr = trickle(ctx, e, prodPool, w, stop, committed)
	}()
	deadline := start.Add(fairMaxSeconds * time.Second)
	if mode == "quiet" {
		deadline = start.Add(o.duration)
	}
wait:
	for time.Now().Before(deadline) && ctx.Err() == nil && (mode == "quiet" || backlogAcked.Load() < int64(backlog)) {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-prodDone: // the trickle failed
			break wait
		}
	}
	close(stop)
	<-prodDone
	if prodErr != nil {
		return res, nil, prodErr
	}
	var failures []string
	if backlog > 0 {
		if got := backlogAcked.Load(); got < int64(backlog) {
			failures = append(failures, fmt.Sprintf("fairness %s: %d of the backlog's %d events acknowledged in %ds", mode, got, backlog, fairMaxSeconds))
		}
		res.DrainSeconds = round2(time.Duration(lastBacklogAck.Load() - start.UnixNano()).Seconds())
		if res.DrainSeconds > 0 {
			res.DrainPerSec = round2(float64(backlogAcked.Load()) / res.DrainSeconds)
		}
	}
	tail := time.Now().Add(15 * time.Second)
	for (nAcked.Load() < int64(nCommitted) || nReceived.Load() < int64(nCommitted)) && time.Now().Before(tail) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return res, nil, err
	}
	if n := nAcked.Load(); n < int64(nCommitted) {
		failures = append(failures, fmt.Sprintf("fairness %s: %d of %d trickle events acknowledged", mode, n, nCommitted))
	}
	if n := nReceived.Load(); n < int64(nCommitted) {
		failures = append(failures, fmt.Sprintf("fairness %s: %d of %d trickle events received", mode, n, nCommitted))
	}
	var toAck, toReceive, toClaim []time.Duration
	for i := range nCommitted {
		c := committed[i].Load()
		if cl := claimed[i].Load(); c != 0 && cl != 0 {
			toClaim = append(toClaim, time.Duration(cl-c))
		}
		if a := acked[i].Load(); c != 0 && a != 0 {
			toAck = append(toAck, time.Duration(a-c))
		}
		if r := received[i].Load(); c != 0 && r != 0 {
			toReceive = append(toReceive, time.Duration(r-c))
		}
	}
	res.TrickleCommitted = nCommitted
	res.TrickleCommitToAck, res.TrickleCommitToReceive = percentiles(toAck), percentiles(toReceive)
	res.TrickleCommitToClaim = percentiles(toClaim)
	p, c := res.TrickleCommitToReceive, res.TrickleCommitToClaim
	fmt.Fprintf(out, "  %-6s trickle %5d events, commit-to-receive p50 %8.2fms p99 %9.2fms max %9.2fms, to claim p50 %8.2fms p99 %9.2fms",
		mode, nCommitted, p.P50, p.P99, p.Max, c.P50, c.P99)
	if backlog > 0 {
		fmt.Fprintf(out, "   backlog drained at %s events/s in %.1fs", fmtRate(res.DrainPerSec), res.DrainSeconds)
	}
	fmt.Fprintln(out)
	return res, failures, nil
}

// dropFairIndexes drops every index heraldpg made for FairBy on the
// run's table, so that the runs without fairness have the table a user
// without it has.
func dropFairIndexes(ctx context.Context, e *env) error {
	rows, err := e.admin.Query(ctx, `SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND indexname LIKE '%\_fair\_%\_idx'`, e.schema)
	if err != nil {
		return err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, n := range names {
		if _, err := e.admin.Exec(ctx, `DROP INDEX "`+e.schema+`"."`+n+`"`); err != nil {
			return fmt.Errorf("dropping index %s: %w", n, err)
		}
	}
	return nil
}

// trickle commits the trickle's events, one per transaction, at
// --trickle-rate per second spread over --tenants tenants, until stop is
// closed. Event i is tenant i % tenants's, on one of its ten keys.
func trickle(ctx context.Context, e *env, pool *pgxpool.Pool, w *herald.Writer[pgx.Tx], stop <-chan struct{},
	committed []atomic.Int64) (int, error) {
	o := e.o
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int, len(committed))
	var (
		wg       sync.WaitGroup
		n        atomic.Int64
		errOnce  sync.Once
		firstErr error
	)
	for range 4 {
		wg.Go(func() {
			for i := range jobs {
				tenant := "t" + strconv.Itoa(i%o.tenants)
				m := herald.Message{
					Topic: fairSubject + ".trickle.events", Key: tenant + "-k" + strconv.Itoa(i/o.tenants%10), Type: eventType,
					Payload: payload(int64(i), tenant),
					Headers: map[string]string{"tenant": tenant, seqHeader: strconv.Itoa(i)},
				}
				if o.fairBy == "topic" {
					m.Topic = fairSubject + ".trickle." + tenant
				}
				err := pgx.BeginFunc(runCtx, pool, func(tx pgx.Tx) error { return w.WriteTx(runCtx, tx, m) })
				if err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
				committed[i].Store(time.Now().UnixNano())
				n.Add(1)
			}
		})
	}
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	sent := 0
loop:
	for sent < len(committed) {
		select {
		case <-tick.C:
		case <-stop:
			break loop
		case <-runCtx.Done():
			break loop
		}
		due := min(int(time.Since(start).Seconds()*float64(o.trickleRate)), len(committed))
		for ; sent < due; sent++ {
			jobs <- sent
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return int(n.Load()), ctx.Err()
}
