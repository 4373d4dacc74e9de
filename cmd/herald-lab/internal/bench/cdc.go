package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// --cdc: Herald's relay reading the outbox's inserts from a logical
// replication slot (heraldcdc.Source) instead of claiming them. The drain
// runs it as a third system beside the polling relay and the ceiling; the
// latency runs with it instead of polling.
//
// The publication and the slot are the run's own, named after its schema,
// so that runs side by side never read each other's. The drain makes them
// before each of its loads and drops them after the drain, so that every
// round starts from a slot that holds exactly the backlog.

// checkLogicalWAL refuses --cdc on a server that cannot have a logical
// replication slot.
func (e *env) checkLogicalWAL(ctx context.Context) error {
	var level string
	if err := e.admin.QueryRow(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return fmt.Errorf("--cdc: reading wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("--cdc reads a logical replication slot, which needs wal_level = logical, and %s has wal_level = %s: "+
			"enable it with ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL (the role also needs REPLICATION)",
			describeDSN(e.o.db), level)
	}
	return nil
}

// cdcName names the run's publication and slot: its schema's name, which is
// random per run and matches heraldcdc's pattern for both.
func (e *env) cdcName() string { return e.schema }

// cdcConfig is the change stream of the run's outbox table.
func (e *env) cdcConfig(createSlot bool) heraldcdc.Config {
	return heraldcdc.Config{
		ConnString: withApplicationName(e.o.db), Schema: e.schema, Table: "herald_outbox",
		Publication: e.cdcName(), Slot: e.cdcName(), CreateSlot: createSlot, Logger: e.log,
	}
}

// withApplicationName names the stream's sessions as the bench's pools are
// named, so that the noise sampler does not count them as other clients.
func withApplicationName(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("application_name", "herald-bench")
		u.RawQuery = q.Encode()
		return u.String()
	}
	if strings.Contains(dsn, "=") { // key=value form
		return dsn + " application_name=herald-bench"
	}
	return dsn
}

// createCDC creates the run's publication and slot, then makes the table's
// inserts streamed: in that order, since a row inserted as streamed before
// the slot existed would be read by neither path. The slot starts at the
// current position: what is inserted from now on is read from it.
func (e *env) createCDC(ctx context.Context) error {
	src, err := heraldcdc.NewSource(ctx, e.cdcConfig(true))
	if err != nil {
		return fmt.Errorf("creating the publication and the replication slot: %w", err)
	}
	if err := src.Close(); err != nil {
		return fmt.Errorf("closing the change stream: %w", err)
	}
	d, err := e.newDriver(e.admin)
	if err != nil {
		return err
	}
	if err := d.StreamInserts(ctx, true); err != nil {
		return fmt.Errorf("making the table's inserts streamed: %w", err)
	}
	return nil
}

// dropCDC undoes createCDC, whatever part of it was done: inserts ready
// again, then the slot and the publication dropped, and the slot's record
// of positions forgotten (the next round makes the slot anew, which would
// otherwise be refused as a slot dropped behind the relay's back). It runs
// even when the run's ctx was cancelled: a slot left behind holds WAL
// forever.
func (e *env) dropCDC() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	d, err := e.newDriver(e.admin)
	if err != nil {
		errs = append(errs, err)
	} else if err := d.StreamInserts(ctx, false); err != nil {
		errs = append(errs, fmt.Errorf("making the table's inserts ready again: %w", err))
	}
	errs = append(errs, e.dropSlot(ctx))
	if d != nil {
		if _, err := d.ForgetSlot(ctx, e.cdcName()); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := e.admin.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{e.cdcName()}.Sanitize()); err != nil {
		errs = append(errs, fmt.Errorf("dropping publication %s: %w", e.cdcName(), err))
	}
	return errors.Join(errs...)
}

// dropSlot drops the run's slot if it exists. A stream just closed may
// leave its walsender holding the slot for a moment (object in use,
// 55006): it waits for it, and after 5s ends it.
func (e *env) dropSlot(ctx context.Context) error {
	slot := e.cdcName()
	patience := time.Now().Add(5 * time.Second)
	for {
		_, err := e.admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		var pgErr *pgconn.PgError
		if err == nil {
			return nil
		}
		if !errors.As(err, &pgErr) || pgErr.Code != "55006" {
			return fmt.Errorf("dropping replication slot %s: %w", slot, err)
		}
		if time.Now().After(patience) {
			_, _ = e.admin.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots
				WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dropping replication slot %s: %w", slot, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// drainSystem runs one system's drain of a fresh backlog to t; the
// change-data-capture relay's between its publication and slot made
// before the load and dropped after the drain, failed or not.
func drainSystem(ctx context.Context, e *env, t drainSink, system string) (r *DrainTarget, problems []string, err error) {
	if system != systemCDC {
		return drainTo(ctx, e, t, system)
	}
	defer func() {
		if derr := e.dropCDC(); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	if err := e.createCDC(ctx); err != nil {
		return nil, nil, err
	}
	return drainTo(ctx, e, t, system)
}

// drainCDC times one relay draining the loaded backlog to pub from the
// slot: the backlog was committed while no one read the slot, as if the
// relay had been down. The relay starts first, its source held at a gate;
// the clock starts as the stream is opened, since PostgreSQL decodes the
// backlog from the write-ahead log from then on, and that is part of the
// work. The relay's batches are configured as the polling relay's; it
// publishes the stream one batch at a time (see herald.Source), and its
// claims of the table find nothing.
func drainCDC(ctx context.Context, e *env, name string, pub herald.Publisher) (*DrainTarget, error) {
	o := e.o
	d, closeStore, err := e.openStore(ctx, o.maxInFlight+4)
	if err != nil {
		return nil, err
	}
	defer closeStore()
	times := &timedStore{Store: d}
	tpub := &timedPublisher{Publisher: pub}
	gate := make(chan struct{})
	src := &timedSource{gate: gate, times: times}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: timedStreamStore{timedStore: times, stream: d.(herald.StreamStore)}, Source: src,
		Publisher: tpub, Logger: e.log, Owner: "herald-bench-cdc-" + name,
		BatchSize: o.batchSize, MaxInFlight: o.maxInFlight, Unordered: o.unordered, MaxPerKey: o.maxPerKey,
		MaxInFlightBytes: o.maxBytes, DeleteOnPublish: o.deleteOnPub, ClaimConcurrency: o.claimConc,
	})
	if err != nil {
		return nil, err
	}
	if err := relay.Start(ctx); err != nil {
		return nil, fmt.Errorf("starting relay: %w", err)
	}
	measured := resetPeakRSS()
	cpu := startCPU(e, systemCDC+"-"+name)
	start := time.Now()
	stream, waitErr := heraldcdc.NewSource(ctx, e.cdcConfig(false))
	var took time.Duration
	if waitErr == nil {
		src.src = stream
		close(gate)
		took, waitErr = waitPublished(ctx, func() int64 { return relay.Stats().Published }, start, int64(o.events))
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = relay.Stop(stopCtx)
	if waitErr != nil {
		if stream != nil {
			_ = stream.Close()
		}
		return nil, waitErr
	}
	st := relay.Stats()
	r := &DrainTarget{
		Name: name, System: systemCDC, Events: o.events,
		Seconds: round(took.Seconds(), 3), EventsPerSec: round2(float64(o.events) / took.Seconds()),
		Published: st.Published, Retried: st.Retried, Dead: st.Dead,
	}
	// Before the stream closes: its walsender's CPU is the database's.
	r.DatabaseCPUPerEventUS, r.ProcessCPUPerEventUS = cpu.stop(st.Published)
	if err := stream.Close(); err != nil {
		return nil, fmt.Errorf("closing the change stream: %w", err)
	}
	r.Breakdown = breakdown(times, tpub, took)
	if peak, ok := peakRSS(); ok && measured {
		r.PeakRSSBytes = &peak
	}
	return r, nil
}

// timedSource times the relay's reads of a change stream, counted as its
// claims, and tells onRead what each read returned. Its reads wait for
// gate to close, when gate is set; src is set before.
type timedSource struct {
	src    herald.Source
	gate   <-chan struct{}
	times  *timedStore
	onRead func(events []herald.Envelope)
}

func (s *timedSource) Next(ctx context.Context, limit int) (herald.SourceBatch, error) {
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return herald.SourceBatch{}, ctx.Err()
		}
	}
	t := time.Now()
	b, err := s.src.Next(ctx, limit)
	if len(b.Events) > 0 {
		if s.times != nil {
			s.times.claims.Add(1)
			s.times.claimNanos.Add(int64(time.Since(t)))
		}
		if s.onRead != nil {
			s.onRead(b.Events)
		}
	}
	return b, err
}

// timedStreamStore is a timedStore that hands streamed events back to the
// table, as the relay needs of a store beside a Source.
type timedStreamStore struct {
	*timedStore
	stream herald.StreamStore
}

func (s timedStreamStore) KeysWaiting(ctx context.Context, keys []herald.TopicKey) ([]herald.TopicKey, error) {
	return s.stream.KeysWaiting(ctx, keys)
}

func (s timedStreamStore) Return(ctx context.Context, p herald.ReturnParams) (int, error) {
	return s.stream.Return(ctx, p)
}

// CDCComparison is the change-data-capture relay's drain rate (--cdc) as a
// share of the other systems' to one destination: one ratio per round,
// both drains of it measured in that round.
type CDCComparison struct {
	Name string `json:"name"`
	// VsCeiling is cdc / ceiling; absent with --ceiling=false.
	VsCeiling *RatioStats `json:"vs_ceiling,omitempty"`
	// VsHerald is cdc / Herald's polling relay.
	VsHerald RatioStats `json:"vs_herald"`
	// The CDC relay's database CPU per event (the walsender's decoding
	// included) as a multiple of the ceiling's and of the polling
	// relay's, where every round measured both.
	DatabaseCPUVsCeiling *RatioStats `json:"database_cpu_vs_ceiling,omitempty"`
	DatabaseCPUVsHerald  *RatioStats `json:"database_cpu_vs_herald,omitempty"`
}

// compareCDC computes and prints the CDC relay's ratios to one
// destination from the rounds' rates and database CPU per event, by
// system.
func compareCDC(out io.Writer, name string, rounds int, rates, dbCPU map[string][]float64) CDCComparison {
	c := CDCComparison{Name: name, VsHerald: ratios(rates[systemCDC], rates[systemHerald])}
	if len(rates[systemCeiling]) > 0 {
		vs := ratios(rates[systemCDC], rates[systemCeiling])
		c.VsCeiling = &vs
		fmt.Fprintf(out, "  %s: CDC relay at %.2f of the ceiling (median of %d rounds; range %.2f-%.2f)\n",
			name, vs.Median, len(vs.Ratios), vs.Min, vs.Max)
	}
	fmt.Fprintf(out, "  %s: CDC relay at %.2f of Herald's polling relay (median of %d rounds; range %.2f-%.2f)\n",
		name, c.VsHerald.Median, len(c.VsHerald.Ratios), c.VsHerald.Min, c.VsHerald.Max)
	measured := func(system string) bool { return len(dbCPU[system]) == rounds }
	if measured(systemCDC) && measured(systemCeiling) {
		cpu := ratios(dbCPU[systemCDC], dbCPU[systemCeiling])
		c.DatabaseCPUVsCeiling = &cpu
		fmt.Fprintf(out, "  %s: CDC relay's database CPU per event at %.2f times the ceiling's (median; range %.2f-%.2f)\n",
			name, cpu.Median, cpu.Min, cpu.Max)
	}
	if measured(systemCDC) && measured(systemHerald) {
		cpu := ratios(dbCPU[systemCDC], dbCPU[systemHerald])
		c.DatabaseCPUVsHerald = &cpu
		fmt.Fprintf(out, "  %s: CDC relay's database CPU per event at %.2f times Herald's polling relay's (median; range %.2f-%.2f)\n",
			name, cpu.Median, cpu.Min, cpu.Max)
	}
	return c
}

// startLatencyCDC makes the run's publication and slot, then the table's
// inserts streamed, and returns the source the latency's relay reads,
// which records when each event was read in read (by its Bench-Seq), and
// what closes it and drops the slot.
func startLatencyCDC(ctx context.Context, e *env, d *heraldpg.Driver, total int, read []atomic.Int64) (herald.Source, func() error, error) {
	src, err := heraldcdc.NewSource(ctx, e.cdcConfig(true))
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("creating the publication and the replication slot: %w", err), e.dropCDC())
	}
	stop := func() error { return errors.Join(src.Close(), e.dropCDC()) }
	if err := d.StreamInserts(ctx, true); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("making the table's inserts streamed: %w", err), stop())
	}
	return &timedSource{src: src, onRead: func(events []herald.Envelope) {
		now := time.Now().UnixNano()
		for k := range events {
			if i, ok := seqOf(events[k].Headers[seqHeader], total); ok {
				read[i].CompareAndSwap(0, now)
			}
		}
	}}, stop, nil
}
