package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// DrainTarget is one drain of the backlog to one publisher.
type DrainTarget struct {
	Name           string  `json:"name"`
	System         string  `json:"system"` // herald, the ceiling it is compared with, or cdc (--cdc)
	Round          int     `json:"round"`
	Events         int     `json:"events"`
	LoadSeconds    float64 `json:"load_seconds"`
	Seconds        float64 `json:"seconds"`
	EventsPerSec   float64 `json:"events_per_sec"`
	Target         float64 `json:"target_events_per_sec"`
	TargetMet      bool    `json:"target_met"`
	Published      int64   `json:"published"`
	Retried        int64   `json:"retried"`
	Dead           int64   `json:"dead"`
	StreamMessages *uint64 `json:"stream_messages,omitempty"`
	Verified       bool    `json:"verified"`
	// PeakRSSBytes is the process's peak resident memory while the relay
	// drained (Linux; absent elsewhere): the relay, its pool and the
	// destination's client, and for jetstream the embedded server.
	PeakRSSBytes *int64 `json:"peak_rss_bytes,omitempty"`
	// DatabaseCPUPerEventUS is the CPU time PostgreSQL's processes spent
	// during the drain, per event, in microseconds (Linux, with PostgreSQL
	// on this machine; absent elsewhere): the database's work per event,
	// background writers and autovacuum included.
	DatabaseCPUPerEventUS *float64 `json:"database_cpu_us_per_event,omitempty"`
	// ProcessCPUPerEventUS is this process's CPU time per event during
	// the drain: the relay or the ceiling's workers, the destination's
	// client, and for jetstream the embedded server.
	ProcessCPUPerEventUS *float64 `json:"process_cpu_us_per_event,omitempty"`
	// Where the time went: calls and mean duration of the relay's store
	// and publisher calls. Batches overlap (MaxInFlight), so the sums may
	// exceed Seconds.
	Breakdown Breakdown `json:"breakdown"`
	// RelayPublished is what each of Herald's relays published (--relays),
	// in the order they were made; absent for the ceiling.
	RelayPublished []int64 `json:"relay_published,omitempty"`
	// KeyOrder is what reading the destination back found about each
	// key's order (Herald's ordered drains to a destination that can be
	// read back in its order: jetstream).
	KeyOrder *KeyOrder `json:"key_order,omitempty"`
}

// Breakdown times the relay's calls to its store and publisher.
type Breakdown struct {
	Claims          int64   `json:"claims"`
	ClaimMeanMS     float64 `json:"claim_mean_ms"`
	Publishes       int64   `json:"publishes"`
	PublishMeanMS   float64 `json:"publish_mean_ms"`
	Completes       int64   `json:"completes"`
	CompleteMeanMS  float64 `json:"complete_mean_ms"`
	ClaimBusyPct    float64 `json:"claim_busy_pct"`    // share of the drain's wall time spent claiming, summed over relays
	PublishBusyPct  float64 `json:"publish_busy_pct"`  // summed over batches in flight
	CompleteBusyPct float64 `json:"complete_busy_pct"` // summed over batches in flight
}

// DrainResult is the relay's drain rate of a backlog.
type DrainResult struct {
	Events      int           `json:"events"`
	Keys        int           `json:"keys"`
	Ordering    string        `json:"ordering"` // ordered, unordered or both
	PayloadSize int           `json:"payload_bytes"`
	BatchSize   int           `json:"batch_size"`
	MaxInFlight int           `json:"max_in_flight"`
	Rounds      int           `json:"rounds"`
	NATSAtomic  bool          `json:"nats_atomic,omitempty"` // --nats-atomic
	Relays      int           `json:"relays"`                // Herald's relays draining together
	Targets     []DrainTarget `json:"targets"`
	// Comparisons are Herald's rate as a share of the ceiling's, one per
	// destination (without --ceiling=false).
	Comparisons []DrainComparison `json:"vs_ceiling,omitempty"`
	// VsMinimal are Herald's rate as a share of the minimal ceiling's
	// (see minimalClaimSQL), one per destination (PostgreSQL, without
	// --ceiling=false).
	VsMinimal []DrainComparison `json:"vs_minimal_ceiling,omitempty"`
	// CDC compares the change-data-capture relay with the other systems,
	// one per destination (--cdc).
	CDC []CDCComparison `json:"cdc,omitempty"`
	// OrderedVsUnordered is Herald's ordered drain rate as a share of its
	// unordered one, one per destination (--ordering both).
	OrderedVsUnordered []DrainComparison `json:"ordered_vs_unordered,omitempty"`
}

// The systems a drain measures: Herald's relay, the ceiling (see
// ceilingSQL) it is compared with, and with --cdc Herald's relay reading
// the write-ahead log (see drainCDC).
const (
	systemHerald  = "herald"
	systemCeiling = "ceiling"
	systemCDC     = "cdc"
	// systemUnordered is Herald's relay claiming by age, beside the
	// ordered one (--ordering both).
	systemUnordered = "herald-unordered"
)

// DrainComparison is Herald's drain rate as a share of the ceiling's to one
// destination: one ratio per round, both measured in that round.
type DrainComparison struct {
	Name string `json:"name"`
	RatioStats
	// DatabaseCPU is Herald's database CPU per event as a multiple of the
	// ceiling's, round by round (where both were measured).
	DatabaseCPU *RatioStats `json:"database_cpu,omitempty"`
}

// RatioStats are per-round ratios with their median and range.
type RatioStats struct {
	Ratios []float64 `json:"ratios"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

func runDrain(ctx context.Context, e *env, out io.Writer) (*DrainResult, []string, error) {
	o := e.o
	ordering, orderingLine := "ordered", "ordered"
	switch {
	case o.unordered:
		ordering, orderingLine = "unordered", "unordered"
	case o.bothOrderings:
		ordering, orderingLine = "both", "ordered and unordered in turn"
	}
	relays := "1 relay,"
	if o.relays > 1 {
		relays = fmt.Sprintf("%d relays, each with", o.relays)
	}
	fmt.Fprintf(out, "\ndrain: backlog of %d events, %d keys, %d-byte payloads; %s; %s batch size %d, %d batches in flight; %d round(s)\n",
		o.events, o.keys, o.payloadBytes, orderingLine, relays, o.batchSize, o.maxInFlight, o.rounds)
	if o.natsAtomic {
		fmt.Fprintln(out, "  Herald's relay sends to jetstream in atomic batches (--nats-atomic)")
	}
	if o.cdc {
		fmt.Fprintf(out, "  cdc: one relay reading the backlog from logical replication slot %s, made before the load and dropped after each round (--cdc)\n",
			e.cdcName())
	}
	res := &DrainResult{Events: o.events, Keys: o.keys, Ordering: ordering, PayloadSize: o.payloadBytes,
		BatchSize: o.batchSize, MaxInFlight: o.maxInFlight, Rounds: o.rounds, NATSAtomic: o.natsAtomic,
		Relays: o.relays}
	var failures []string

	sinks, err := sinksNamed(o.to)
	if err != nil {
		return res, nil, err
	}
	systems := []string{systemHerald}
	if o.bothOrderings {
		systems = append(systems, systemUnordered)
	}
	if o.ceiling {
		systems = append(systems, systemCeiling)
		if e.my == nil {
			systems = append(systems, systemMinimal)
		}
	}
	if o.cdc {
		systems = append(systems, systemCDC)
	}
	for _, t := range sinks {
		rates, dbCPU := map[string][]float64{}, map[string][]float64{}
		for round := range o.rounds {
			// Each round starts with another system, so that none
			// always runs first while the machine drifts.
			for k := range systems {
				system := systems[(k+round)%len(systems)]
				r, problems, err := drainSystem(ctx, e, t, system)
				if err != nil {
					return res, failures, fmt.Errorf("%s (%s): %w", t.name, system, err)
				}
				r.Round = round + 1
				for _, p := range problems {
					failures = append(failures, "drain "+t.name+" ("+system+"): "+p)
				}
				res.Targets = append(res.Targets, *r)
				rates[system] = append(rates[system], r.EventsPerSec)
				if r.DatabaseCPUPerEventUS != nil {
					dbCPU[system] = append(dbCPU[system], *r.DatabaseCPUPerEventUS)
				}
				printDrain(out, e.databaseName(), t, r, problems)
			}
		}
		if o.ceiling {
			res.Comparisons = append(res.Comparisons, compareCeiling(out, t.name, systemCeiling, "the ceiling", o.rounds, rates, dbCPU))
			if e.my == nil {
				res.VsMinimal = append(res.VsMinimal, compareCeiling(out, t.name, systemMinimal, "the minimal ceiling", o.rounds, rates, dbCPU))
			}
		}
		if o.cdc {
			res.CDC = append(res.CDC, compareCDC(out, t.name, o.rounds, rates, dbCPU))
		}
		if o.bothOrderings {
			c := DrainComparison{Name: t.name, RatioStats: ratios(rates[systemHerald], rates[systemUnordered])}
			fmt.Fprintf(out, "  %s: Herald ordered at %.2f of unordered (median of %d rounds; range %.2f-%.2f)\n",
				t.name, c.Median, len(c.Ratios), c.Min, c.Max)
			res.OrderedVsUnordered = append(res.OrderedVsUnordered, c)
		}
	}
	return res, failures, nil
}

// compareCeiling prints and returns Herald's rate, and its database CPU
// per event, against those of the ceiling system (called what) round by
// round.
func compareCeiling(out io.Writer, name, system, what string, rounds int, rates, dbCPU map[string][]float64) DrainComparison {
	c := DrainComparison{Name: name, RatioStats: ratios(rates[systemHerald], rates[system])}
	fmt.Fprintf(out, "  %s: Herald at %.2f of %s (median of %d rounds; range %.2f-%.2f)\n",
		name, c.Median, what, len(c.Ratios), c.Min, c.Max)
	if len(dbCPU[systemHerald]) == rounds && len(dbCPU[system]) == rounds {
		cpu := ratios(dbCPU[systemHerald], dbCPU[system])
		c.DatabaseCPU = &cpu
		fmt.Fprintf(out, "  %s: Herald's database CPU per event at %.2f times %s's (median; range %.2f-%.2f)\n",
			name, cpu.Median, what, cpu.Min, cpu.Max)
	}
	return c
}

// drainTo loads a fresh backlog, drains it to a freshly opened t with
// system, and verifies that every row was published once and, where the
// destination can tell, that it holds exactly the backlog.
func drainTo(ctx context.Context, e *env, t drainSink, system string) (*DrainTarget, []string, error) {
	o := e.o
	loadSecs, err := loadFresh(ctx, e, system)
	if err != nil {
		return nil, nil, err
	}
	pub, count, closeSink, err := t.open(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	defer closeSink()
	var r *DrainTarget
	switch system {
	case systemCeiling:
		r, err = drainCeiling(ctx, e, t.name, pub)
	case systemMinimal:
		r, err = drainMinimal(ctx, e, t.name, pub)
	case systemCDC:
		r, err = drainCDC(ctx, e, t.name, pub)
	case systemUnordered:
		if r, err = drainOnce(ctx, e, t.name, pub, true); err == nil {
			r.System = system
		}
	default:
		r, err = drainOnce(ctx, e, t.name, pub, o.unordered)
	}
	if err != nil {
		return nil, nil, err
	}
	r.LoadSeconds = round(loadSecs, 3)
	r.Target, r.TargetMet = t.target, t.target == 0 || r.EventsPerSec >= t.target
	var problems []string
	if r.Published != int64(o.events) || r.Dead != 0 {
		problems = append(problems, fmt.Sprintf("acknowledged %d published and %d dead, want %d and 0", r.Published, r.Dead, o.events))
	}
	// Herald deleting on publish leaves no row; otherwise every event is
	// a published row. The change-data-capture relay writes nothing for
	// an event it published: every row is still as inserted, streamed.
	state, want := string(heraldadmin.StatePublished), o.events
	switch {
	case (system == systemHerald || system == systemUnordered) && o.deleteOnPub:
		state, want = "", 0
	case system == systemCDC:
		state = string(heraldadmin.StateStreamed)
	}
	if system == systemMinimal {
		rows, unpublished, err := e.countMinimal(ctx)
		if err != nil {
			return nil, nil, err
		}
		if rows != o.events || unpublished != 0 {
			problems = append(problems, fmt.Sprintf("%d rows in the minimal table, %d unpublished, want %d and 0", rows, unpublished, o.events))
		}
	} else if n, err := e.countState(ctx, state); err != nil {
		return nil, nil, err
	} else if n != want {
		what := "rows published"
		if state == "" {
			what = "rows"
		}
		problems = append(problems, fmt.Sprintf("%d %s in the table, want %d", n, what, want))
	}
	if count != nil {
		held, err := count(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("counting what %s holds: %w", t.name, err)
		}
		msgs := uint64(held)
		r.StreamMessages = &msgs
		if held != int64(o.events) {
			problems = append(problems, fmt.Sprintf("%s holds %d messages, want %d", t.name, held, o.events))
		}
	}
	// Herald's ordered relays, however many, polling or not, must deliver
	// each key's events in the order they were committed. The ceiling
	// does not keep it (see ceilingSQL).
	if t.keyOrder != nil && system != systemCeiling && system != systemMinimal && system != systemUnordered && !o.unordered {
		ko, err := t.keyOrder(ctx, e)
		if err != nil {
			return nil, nil, fmt.Errorf("reading back %s: %w", t.name, err)
		}
		r.KeyOrder = ko
		problems = append(problems, ko.Problems()...)
	}
	if len(r.RelayPublished) > 0 {
		var sum int64
		for _, n := range r.RelayPublished {
			sum += n
		}
		if sum != r.Published {
			problems = append(problems, fmt.Sprintf("the relays published %d events between them, their total says %d", sum, r.Published))
		}
	}
	r.Verified = len(problems) == 0
	return r, problems, nil
}

// printDrain prints one drain's line.
func printDrain(out io.Writer, database string, t drainSink, r *DrainTarget, problems []string) {
	name := t.name + " " + r.System
	if r.System == systemHerald && t.target > 0 {
		fmt.Fprintf(out, "  to %-18s %7.2fs %9s events/s   (target >= %s/s): %s\n",
			name, r.Seconds, fmtRate(r.EventsPerSec), fmtRate(t.target), verdict(r.TargetMet))
	} else {
		fmt.Fprintf(out, "  to %-18s %7.2fs %9s events/s   (%s)\n", name, r.Seconds, fmtRate(r.EventsPerSec), t.note)
	}
	b := r.Breakdown
	read := "claim"
	if r.System == systemCDC {
		read = "stream read" // Source.Next; the relay's claims of the table find nothing
	}
	fmt.Fprintf(out, "     %s %d x %.1fms (%.0f%% of wall time), publish %d x %.1fms, acknowledge %d x %.1fms\n",
		read, b.Claims, b.ClaimMeanMS, b.ClaimBusyPct, b.Publishes, b.PublishMeanMS, b.Completes, b.CompleteMeanMS)
	if r.DatabaseCPUPerEventUS != nil && r.ProcessCPUPerEventUS != nil {
		fmt.Fprintf(out, "     CPU per event: %s %.1fus, this process %.1fus\n", database, *r.DatabaseCPUPerEventUS, *r.ProcessCPUPerEventUS)
	}
	if r.PeakRSSBytes != nil {
		fmt.Fprintf(out, "     peak resident memory while draining: %.0f MiB\n", float64(*r.PeakRSSBytes)/(1<<20))
	}
	if len(r.RelayPublished) > 1 {
		counts := make([]string, len(r.RelayPublished))
		for i, n := range r.RelayPublished {
			counts[i] = fmtRate(float64(n))
		}
		fmt.Fprintf(out, "     %d relays published %s events\n", len(r.RelayPublished), strings.Join(counts, " + "))
	}
	if r.StreamMessages != nil {
		fmt.Fprintf(out, "     %s holds %d messages (want %d)\n", t.name, *r.StreamMessages, r.Events)
	}
	if k := r.KeyOrder; k != nil {
		fmt.Fprintf(out, "     read back in order: %d messages of %d keys, %d out of order, %d repeated\n",
			k.Messages, k.Keys, k.OutOfOrder, k.Repeated)
	}
	if len(problems) > 0 {
		fmt.Fprintf(out, "     VERIFICATION FAILED: %v\n", problems)
	}
}

// ratios divides a by b round by round, with the median and range.
func ratios(a, b []float64) RatioStats {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			rs = append(rs, round(a[i]/b[i], 3))
		}
	}
	sp := spreadOf(rs)
	return RatioStats{Ratios: sp.Values, Median: sp.Median, Min: sp.Min, Max: sp.Max}
}

// Spread is a figure measured once per round, with its median and range.
type Spread struct {
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// spreadOf is the median and range of vs, zero when vs is empty.
func spreadOf(vs []float64) Spread {
	sp := Spread{Values: vs}
	if len(vs) == 0 {
		return sp
	}
	sorted := slices.Sorted(slices.Values(vs))
	sp.Min, sp.Max = sorted[0], sorted[len(sorted)-1]
	if m := len(sorted) / 2; len(sorted)%2 == 1 {
		sp.Median = sorted[m]
	} else {
		sp.Median = round((sorted[m-1]+sorted[m])/2, 3)
	}
	return sp
}

// loadFresh empties the tables and loads the backlog for system (the
// minimal ceiling's into its own table), returning how long the load
// took.
func loadFresh(ctx context.Context, e *env, system string) (float64, error) {
	if err := e.truncate(ctx); err != nil {
		return 0, err
	}
	loadStart := time.Now()
	if system == systemMinimal {
		if err := loadMinimal(ctx, e); err != nil {
			return 0, err
		}
	} else if e.my != nil {
		if err := e.my.loadBacklog(ctx, e, e.o.events, e.o.keys); err != nil {
			return 0, err
		}
	} else {
		if err := loadBacklog(ctx, e, e.o.events, e.o.keys); err != nil {
			return 0, err
		}
		if _, err := e.admin.Exec(ctx, `ANALYZE `+e.outbox); err != nil {
			return 0, fmt.Errorf("analyzing: %w", err)
		}
	}
	secs := time.Since(loadStart).Seconds()
	e.checkpoint(ctx)
	return secs, nil
}

// drainOnce times o.relays relays draining the loaded backlog to pub
// together, as that many relay processes would: each has its own store on
// a pool of its own and its own owner name, on the same outbox table. They
// share the destination's client (pub), which takes concurrent calls.
// Every relay is running before any claims (the gate), so none drains a
// head start; the clock starts when the gate opens.
func drainOnce(ctx context.Context, e *env, name string, pub herald.Publisher, unordered bool) (*DrainTarget, error) {
	o := e.o
	tpub := &timedPublisher{Publisher: pub}
	gate := make(chan struct{})
	relays := make([]*herald.Relay, o.relays)
	stores := make([]*timedStore, o.relays)
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	for i := range o.relays {
		// Each relay's own pool: a claim, MaxInFlight acknowledgements,
		// the rescuer and the cleaner.
		d, closeStore, err := e.openStore(ctx, o.maxInFlight+4)
		if err != nil {
			return nil, err
		}
		closers = append(closers, closeStore)
		owner := "herald-bench-" + name
		if unordered {
			owner += "-unordered"
		}
		if o.relays > 1 {
			owner += "-" + strconv.Itoa(i+1)
		}
		stores[i] = &timedStore{Store: d, gate: gate}
		relays[i], err = herald.NewRelay(&herald.RelayConfig{
			Store: stores[i], Publisher: tpub, Logger: e.log, Owner: owner,
			BatchSize: o.batchSize, MaxInFlight: o.maxInFlight, Unordered: unordered, MaxPerKey: o.maxPerKey,
			MaxInFlightBytes: o.maxBytes, DeleteOnPublish: o.deleteOnPub, ClaimConcurrency: o.claimConc,
		})
		if err != nil {
			return nil, err
		}
	}

	measured := resetPeakRSS()
	label := systemHerald + "-" + name
	if unordered {
		label += "-unordered"
	}
	cpu := startCPU(e, label)
	startErrs := make([]error, len(relays))
	var wg sync.WaitGroup
	for i, relay := range relays {
		wg.Go(func() { startErrs[i] = relay.Start(ctx) })
	}
	wg.Wait()
	start := time.Now()
	close(gate)
	var took time.Duration
	waitErr := errors.Join(startErrs...)
	if waitErr != nil {
		waitErr = fmt.Errorf("starting relay: %w", waitErr)
	} else {
		took, waitErr = waitPublished(ctx, func() int64 { return sumStats(relays).Published }, start, int64(o.events))
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, relay := range relays {
		wg.Go(func() { _ = relay.Stop(stopCtx) })
	}
	wg.Wait()
	if waitErr != nil {
		return nil, waitErr
	}
	st := sumStats(relays)
	r := &DrainTarget{
		Name: name, System: systemHerald, Events: o.events,
		Seconds: round(took.Seconds(), 3), EventsPerSec: round2(float64(o.events) / took.Seconds()),
		Published: st.Published, Retried: st.Retried, Dead: st.Dead,
	}
	for _, relay := range relays {
		r.RelayPublished = append(r.RelayPublished, relay.Stats().Published)
	}
	r.DatabaseCPUPerEventUS, r.ProcessCPUPerEventUS = cpu.stop(st.Published)
	r.Breakdown = breakdown(sumTimes(stores), tpub, took)
	if peak, ok := peakRSS(); ok && measured {
		r.PeakRSSBytes = &peak
	}
	return r, nil
}

// sumStats adds up the relays' counts.
func sumStats(relays []*herald.Relay) herald.RelayStats {
	var sum herald.RelayStats
	for _, r := range relays {
		st := r.Stats()
		sum.Published += st.Published
		sum.Retried += st.Retried
		sum.Dead += st.Dead
	}
	return sum
}

// waitPublished checks published every 50ms until it reaches want, and
// returns the time since start. It fails when the count stops moving for
// 30s.
func waitPublished(ctx context.Context, published func() int64, start time.Time, want int64) (time.Duration, error) {
	const stall = 30 * time.Second
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	last, lastMove := int64(-1), time.Now()
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case now := <-t.C:
			n := published()
			if n >= want {
				return now.Sub(start), nil
			}
			if n != last {
				last, lastMove = n, now
			} else if now.Sub(lastMove) > stall {
				return 0, fmt.Errorf("relay stalled: %d of %d events published, none for %s", n, want, stall)
			}
		}
	}
}

// loadBacklog writes n ready events with COPY: the rows WriteTx would
// write (UUIDv7 ids, the same fields and payload size), without going
// through the relay or a transaction per event.
func loadBacklog(ctx context.Context, e *env, n, keys int) error {
	conn, err := e.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	i := 0
	rows := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		customer := "customer-" + strconv.Itoa(i%keys)
		aggID := strconv.Itoa(i)
		return []any{id, drainSubject, customer, eventType, aggregateType, aggID,
			paddedPayload(int64(i), customer, e.o.payloadBytes), headersJSON}, nil
	})
	_, err = conn.Conn().CopyFrom(ctx, pgx.Identifier{e.schema, "herald_outbox"},
		[]string{"id", "topic", "key", "type", "aggregate_type", "aggregate_id", "payload", "headers"}, rows)
	if err != nil {
		return fmt.Errorf("loading the backlog: %w", err)
	}
	return nil
}

// timedStore times the relay's claims and acknowledgements. Its claims
// wait for gate to close, when gate is set.
type timedStore struct {
	herald.Store
	gate                     <-chan struct{}
	claims, claimNanos       atomic.Int64
	completes, completeNanos atomic.Int64
}

func (s *timedStore) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	t := time.Now()
	envs, err := s.Store.Claim(ctx, p)
	if len(envs) > 0 {
		s.claims.Add(1)
		s.claimNanos.Add(int64(time.Since(t)))
	}
	return envs, err
}

func (s *timedStore) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	t := time.Now()
	r, err := s.Store.Complete(ctx, p)
	s.completes.Add(1)
	s.completeNanos.Add(int64(time.Since(t)))
	return r, err
}

// sumTimes adds up the times of stores.
func sumTimes(stores []*timedStore) *timedStore {
	sum := &timedStore{}
	for _, s := range stores {
		sum.claims.Add(s.claims.Load())
		sum.claimNanos.Add(s.claimNanos.Load())
		sum.completes.Add(s.completes.Load())
		sum.completeNanos.Add(s.completeNanos.Load())
	}
	return sum
}

// timedPublisher times the relay's publishes.
type timedPublisher struct {
	herald.Publisher
	calls, nanos atomic.Int64
}

func (p *timedPublisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	t := time.Now()
	err := p.Publisher.Publish(ctx, batch)
	p.calls.Add(1)
	p.nanos.Add(int64(time.Since(t)))
	return err
}

func breakdown(s *timedStore, p *timedPublisher, wall time.Duration) Breakdown {
	mean := func(nanos, n int64) float64 {
		if n == 0 {
			return 0
		}
		return ms(time.Duration(nanos / n))
	}
	pct := func(nanos int64) float64 { return round(100*float64(nanos)/float64(wall), 1) }
	return Breakdown{
		Claims: s.claims.Load(), ClaimMeanMS: mean(s.claimNanos.Load(), s.claims.Load()),
		Publishes: p.calls.Load(), PublishMeanMS: mean(p.nanos.Load(), p.calls.Load()),
		Completes: s.completes.Load(), CompleteMeanMS: mean(s.completeNanos.Load(), s.completes.Load()),
		ClaimBusyPct: pct(s.claimNanos.Load()), PublishBusyPct: pct(p.nanos.Load()),
		CompleteBusyPct: pct(s.completeNanos.Load()),
	}
}

// resetPeakRSS returns what the process holds to the system and resets its
// peak resident memory (Linux's clear_refs), so that peakRSS reads the
// peak from here on. It reports whether the reset worked.
func resetPeakRSS() bool {
	runtime.GC()
	debug.FreeOSMemory()
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS returns the process's peak resident memory (VmHWM), in bytes.
func peakRSS() (int64, bool) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
