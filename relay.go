package herald

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Relay publishes committed outbox events: it claims batches of ready rows,
// publishes them outside any transaction, and acknowledges each batch in one
// statement that checks the claim token. It also rescues rows whose relay
// died and deletes published rows past retention.
//
// Several relays may run against one table; they divide the rows between
// them with FOR UPDATE SKIP LOCKED and leases.
type Relay struct {
	cfg RelayConfig
	log *slog.Logger

	mu      sync.Mutex
	state   relayState
	stop    context.CancelFunc // stops claiming and the background loops
	abort   context.CancelFunc // cancels in-flight publishes
	pubCtx  context.Context
	done    chan struct{} // closed when every goroutine has returned
	wake    chan struct{}
	loops   sync.WaitGroup
	batches sync.WaitGroup

	abortedAt atomic.Int64 // unix nanoseconds when Stop's deadline passed; 0 before

	outageMu    sync.Mutex
	outageUntil time.Time
	outageDelay time.Duration
	outageErr   string // what the destination said when the outage began

	healthMu sync.Mutex
	dbDown   bool
	dbErr    string // the last claim error while the database is unreachable

	inFlight      atomic.Int64  // claimed rows not yet acknowledged or given up
	inFlightBytes atomic.Int64  // their payload and header bytes
	bytesFreed    chan struct{} // a batch gave its bytes back
	acking        chan struct{} // a slot per batch being acknowledged, MaxInFlight of them

	lostMu     sync.Mutex
	lostClaims []string // tokens of claims whose answer never came

	stats relayCounters

	pauses pauses // the operators' pauses, as last read

	hb heartbeat // what the relay's heartbeats say of it

	hooks hooks // RelayConfig.Observer's, found once

	unordered map[string]bool // RelayConfig.UnorderedTopics
	skipDead  map[string]bool // RelayConfig.SkipDeadTopics
}

type relayState int

const (
	relayNew relayState = iota
	relayRunning
	relayStopped
)

// RelayStats are counters since the relay started.
type RelayStats struct {
	Claimed   int64 // rows claimed
	Published int64 // rows acknowledged as published
	Retried   int64 // rows rescheduled after a failure
	Dead      int64 // rows made dead
	HeldBack  int64 // rows returned behind a failed event of their key
	Released  int64 // rows released on shutdown
	Rescued   int64 // rows of dead relays returned to ready
	Deleted   int64 // published rows removed by retention
	Streamed  int64 // events read from RelayConfig.Source
}

type relayCounters struct {
	claimed, published, retried, heldBack, dead, released, rescued, deleted, streamed atomic.Int64
}

// NewRelay validates cfg and returns a relay ready to Start.
func NewRelay(cfg *RelayConfig) (*Relay, error) {
	if cfg == nil {
		return nil, errors.New("herald: NewRelay: config is nil")
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Relay{
		cfg:        c,
		log:        c.Logger.With("component", "herald.relay", "owner", c.Owner),
		wake:       make(chan struct{}, 1),
		bytesFreed: make(chan struct{}, 1),
		acking:     make(chan struct{}, c.MaxInFlight),
		done:       make(chan struct{}),
		unordered:  setOf(c.UnorderedTopics),
		skipDead:   setOf(c.SkipDeadTopics),
		hb:         heartbeat{store: heartbeatsOf(c)},
		hooks:      hooksOf(c.Observer),
	}, nil
}

// Start checks the database is reachable and starts the relay's loops. It
// returns once they run. The relay runs until Stop; ctx bounds only the
// start-up checks.
//
// On a Store that implements StreamSwitch, Start keeps the polling and the
// change-data-capture paths apart: with RelayConfig.Source it makes the
// table's inserts streamed (the Source holds its position already);
// without one it refuses a table whose inserts are streamed.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case relayRunning:
		return nil
	case relayStopped:
		return ErrRelayStopped
	}
	if err := r.cfg.Store.Ping(ctx); err != nil {
		return err
	}
	if err := r.switchPaths(ctx); err != nil {
		return err
	}
	loopCtx, stop := context.WithCancel(context.Background())
	pubCtx, abort := context.WithCancel(context.Background())
	r.stop, r.abort, r.pubCtx = stop, abort, pubCtx
	r.state = relayRunning

	slots := make(chan struct{}, r.cfg.MaxInFlight)
	r.loops.Add(2 + r.cfg.ClaimConcurrency)
	for range r.cfg.ClaimConcurrency {
		go func() { defer r.loops.Done(); r.claimLoop(loopCtx, slots, claimLane{batch: r.cfg.BatchSize}) }()
	}
	lane, fair := r.fairLane()
	if fair {
		laneSlots := make(chan struct{}, fairLaneInFlight)
		r.loops.Add(1)
		go func() { defer r.loops.Done(); r.claimLoop(loopCtx, laneSlots, lane) }()
	}
	go func() { defer r.loops.Done(); r.every(loopCtx, r.cfg.RescueInterval, r.rescue) }()
	go func() {
		defer r.loops.Done()
		if r.cfg.Retention > 0 {
			r.every(loopCtx, r.cfg.CleanupInterval, r.cleanup)
		}
	}()
	if r.cfg.Source != nil {
		r.loops.Add(1)
		go func() { defer r.loops.Done(); r.streamLoop(loopCtx) }()
	}
	r.startHeartbeats(loopCtx)
	go func() {
		r.loops.Wait()
		r.batches.Wait()
		close(r.done)
	}()
	r.log.Info("relay started", "batch_size", r.cfg.BatchSize, "max_in_flight", r.cfg.MaxInFlight, "lease", r.cfg.Lease,
		"ordered", !r.cfg.Unordered, "change_stream", r.cfg.Source != nil, "fair_lane", fair)
	return nil
}

// Stop stops claiming and waits for in-flight batches to be published and
// acknowledged. When ctx ends first, in-flight publishes are cancelled and
// every row not confirmed by the broker is released at once, so no row waits
// for its lease to expire. Stop is safe to call more than once, and before
// Start.
func (r *Relay) Stop(ctx context.Context) error {
	r.mu.Lock()
	switch r.state {
	case relayNew:
		r.state = relayStopped
		r.mu.Unlock()
		return nil
	case relayStopped:
		r.mu.Unlock()
		if r.stop == nil {
			return nil
		}
		<-r.done
		return nil
	}
	r.state = relayStopped
	r.stop()
	r.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		r.log.Warn("stop deadline reached; cancelling in-flight publishes and releasing their rows")
		r.abortedAt.Store(r.cfg.Clock.Now().UnixNano())
		r.abort()
		<-r.done
	}
	r.abort()
	r.gone(ctx)
	r.log.Info("relay stopped", "published", r.stats.published.Load())
	return nil
}

// Wake makes the relay claim at once instead of waiting for its next poll.
// A service that writes events and runs the relay in one process may call it
// after committing.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Health is whether the relay's database and destination answer.
type Health struct {
	Running bool
	// Database is the last error of a claim while the database is
	// unreachable; empty when it answers.
	Database string
	// Destination is the error that made the relay pause for an outage;
	// empty when the destination answers.
	Destination string
}

// Health returns the relay's view of its database and destination, as of
// its last claim and publish.
func (r *Relay) Health() Health {
	r.mu.Lock()
	h := Health{Running: r.state == relayRunning}
	r.mu.Unlock()
	r.healthMu.Lock()
	h.Database = r.dbErr
	r.healthMu.Unlock()
	r.outageMu.Lock()
	if r.outageDelay != 0 {
		h.Destination = r.outageErr
	}
	r.outageMu.Unlock()
	return h
}

// noteDatabase records the outcome of a claim for Health and the log: one
// line when the database becomes unreachable and one when it is back; each
// retry in between only at Debug.
func (r *Relay) noteDatabase(err error) {
	r.healthMu.Lock()
	defer r.healthMu.Unlock()
	switch {
	case err != nil && !r.dbDown:
		r.dbDown = true
		r.dbErr = Scrub(err.Error())
		// A claim whose answer was lost (a timeout, a dropped connection,
		// the process paused) may have committed: its rows wait for
		// their lease and the rescuer, which the line says.
		r.log.Warn("database unreachable; retrying claims; the rows will be rescued when their lease expires if the failed claim took any, or released as soon as the database answers",
			"error", r.dbErr)
	case err != nil:
		r.dbErr = Scrub(err.Error())
		r.log.Debug("claim failed; retrying", "error", r.dbErr)
	case r.dbDown:
		r.dbDown = false
		r.dbErr = ""
		r.log.Info("database reachable again")
	}
}

// InFlight returns how many claimed rows the relay holds and has not yet
// acknowledged, released or given up.
func (r *Relay) InFlight() int64 { return r.inFlight.Load() }

// InFlightBytes returns the payload and header bytes of those rows, which
// RelayConfig.MaxInFlightBytes bounds.
func (r *Relay) InFlightBytes() int64 { return r.inFlightBytes.Load() }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	s := &r.stats
	return RelayStats{
		Claimed: s.claimed.Load(), Published: s.published.Load(), Retried: s.retried.Load(), HeldBack: s.heldBack.Load(),
		Dead: s.dead.Load(), Released: s.released.Load(), Rescued: s.rescued.Load(), Deleted: s.deleted.Load(),
		Streamed: s.streamed.Load(),
	}
}
