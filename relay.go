package herald

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
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
	dbErr    string // the last claim error while the database is unreachable

	inFlight atomic.Int64 // claimed rows not yet acknowledged or given up

	stats relayCounters

	unordered map[string]bool // RelayConfig.UnorderedTopics
	skipDead  map[string]bool // RelayConfig.SkipDeadTopics
}

// abortGrace is how long, after Stop's deadline, the relay keeps trying to
// acknowledge and release in-flight rows.
const abortGrace = 2 * time.Second

// maxStoredPayload is the payload cap applied to claimed rows: the writer's
// cap is the writer's business; the relay refuses only what no broker takes.
const maxStoredPayload = 64 << 20

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
}

type relayCounters struct {
	claimed, published, retried, heldBack, dead, released, rescued, deleted atomic.Int64
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
		cfg:       c,
		log:       c.Logger.With("component", "herald.relay", "owner", c.Owner),
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		unordered: setOf(c.UnorderedTopics),
		skipDead:  setOf(c.SkipDeadTopics),
	}, nil
}

// Start checks the database is reachable and starts the relay's loops. It
// returns once they run. The relay runs until Stop; ctx bounds only the
// start-up check.
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
	loopCtx, stop := context.WithCancel(context.Background())
	pubCtx, abort := context.WithCancel(context.Background())
	r.stop, r.abort, r.pubCtx = stop, abort, pubCtx
	r.state = relayRunning

	r.loops.Add(3)
	go func() { defer r.loops.Done(); r.claimLoop(loopCtx) }()
	go func() { defer r.loops.Done(); r.every(loopCtx, r.cfg.RescueInterval, r.rescue) }()
	go func() {
		defer r.loops.Done()
		if r.cfg.Retention > 0 {
			r.every(loopCtx, r.cfg.CleanupInterval, r.cleanup)
		}
	}()
	go func() {
		r.loops.Wait()
		r.batches.Wait()
		close(r.done)
	}()
	r.log.Info("relay started", "batch_size", r.cfg.BatchSize, "max_in_flight", r.cfg.MaxInFlight, "lease", r.cfg.Lease,
		"ordered", !r.cfg.Unordered)
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

// InFlight returns how many claimed rows the relay holds and has not yet
// acknowledged, released or given up.
func (r *Relay) InFlight() int64 { return r.inFlight.Load() }

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	s := &r.stats
	return RelayStats{
		Claimed: s.claimed.Load(), Published: s.published.Load(), Retried: s.retried.Load(), HeldBack: s.heldBack.Load(),
		Dead: s.dead.Load(), Released: s.released.Load(), Rescued: s.rescued.Load(), Deleted: s.deleted.Load(),
	}
}

// claimLoop claims batches while a publish slot is free. Polling adapts: a
// full batch is followed by the next claim at once, a partial one by
// PollInterval, and empty claims double the wait up to IdlePollInterval.
func (r *Relay) claimLoop(ctx context.Context) {
	slots := make(chan struct{}, r.cfg.MaxInFlight)
	idle := r.cfg.PollInterval
	claimErrDelay := r.cfg.PollInterval
	dbDown := false
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if wait := r.outageWait(); wait > 0 {
			if !r.sleep(ctx, wait) {
				<-slots
				return
			}
		}
		if ctx.Err() != nil {
			<-slots
			return
		}
		token := uuid.NewString()
		// The claim runs to completion even when Stop is called meanwhile:
		// cancelling it could leave rows claimed that this relay never saw.
		// The lease starts when the database runs the claim, so its end is
		// measured from before the call: acknowledgements never plan on
		// time the lease does not have.
		claimedAt := r.cfg.Clock.Now()
		claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
		batch, err := r.cfg.Store.Claim(claimCtx, ClaimParams{
			Token: token, Owner: r.cfg.Owner, Limit: r.cfg.BatchSize, Lease: r.cfg.Lease,
			Unordered: r.cfg.Unordered, UnorderedTopics: r.cfg.UnorderedTopics, PerKey: r.cfg.MaxPerKey,
		})
		cancel()
		if err != nil {
			<-slots
			// One line when the database becomes unreachable and one when
			// it is back; each retry in between only at Debug.
			r.healthMu.Lock()
			r.dbErr = Scrub(err.Error())
			r.healthMu.Unlock()
			if !dbDown {
				dbDown = true
				r.log.Warn("database unreachable; retrying claims", "error", Scrub(err.Error()))
			} else {
				r.log.Debug("claim failed; retrying", "error", Scrub(err.Error()), "retry_in", claimErrDelay)
			}
			if !r.sleep(ctx, claimErrDelay) {
				return
			}
			claimErrDelay = min(claimErrDelay*2, r.cfg.OutageBackoffCap)
			continue
		}
		if dbDown {
			dbDown = false
			r.healthMu.Lock()
			r.dbErr = ""
			r.healthMu.Unlock()
			r.log.Info("database reachable again")
		}
		claimErrDelay = r.cfg.PollInterval
		if len(batch) == 0 {
			<-slots
			if !r.sleep(ctx, idle) {
				return
			}
			idle = min(idle*2, r.cfg.IdlePollInterval)
			continue
		}
		idle = r.cfg.PollInterval
		r.stats.claimed.Add(int64(len(batch)))
		r.inFlight.Add(int64(len(batch)))
		r.cfg.Observer.Claimed(batch)
		r.log.Debug("claimed batch", "batch_size", len(batch), "claim_token", token)
		r.batches.Add(1)
		go func() {
			defer r.batches.Done()
			defer func() { <-slots }()
			defer r.inFlight.Add(-int64(len(batch)))
			r.process(token, claimedAt, batch)
		}()
		if len(batch) < r.cfg.BatchSize && !r.sleep(ctx, r.cfg.PollInterval) {
			return
		}
	}
}

// sleep waits d, or until a Wake; it returns false when ctx ended.
func (r *Relay) sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-r.cfg.Clock.After(d):
		return true
	case <-r.wake:
		return true
	case <-ctx.Done():
		return false
	}
}

// process publishes one claimed batch and records the outcome.
func (r *Relay) process(token string, claimedAt time.Time, batch []Envelope) {
	// Acknowledge before the lease runs out; past it another relay may own
	// the rows and the token check would change nothing anyway.
	deadline := claimedAt.Add(r.cfg.Lease)
	if !r.cfg.Clock.Now().Before(deadline) {
		// The process was paused or starved past its lease: another relay
		// may be publishing these events already, so sending them now could
		// only put them on the broker twice and out of order.
		r.log.Warn("lease expired before publishing; leaving the batch to the rescuer",
			"rows", len(batch), "claim_token", token)
		return
	}

	// Rows written by other programs with plain SQL may break the rules
	// WriteTx enforces (a reserved header, a topic with spaces). They go to
	// the dead letters with the reason instead of reaching the broker. In
	// an ordered claim, the later events of their key are held back.
	errs := make([]error, len(batch))
	failedKeys := map[string]bool{}
	var sent []int // indexes into batch of the events handed to the publisher
	for i := range batch {
		env := &batch[i]
		k, ordered := r.orderKey(env)
		switch {
		case ordered && failedKeys[k]:
			errs[i] = ErrHeldBack
		default:
			if err := validate(i, &env.Message, maxStoredPayload); err != nil {
				errs[i] = Permanent(fmt.Errorf("invalid row: %w", err))
				if ordered {
					failedKeys[k] = true
				}
				continue
			}
			sent = append(sent, i)
		}
	}

	var err error
	if len(sent) > 0 {
		valid := batch
		if len(sent) < len(batch) {
			valid = make([]Envelope, len(sent))
			for j, i := range sent {
				valid[j] = batch[i]
			}
		}
		// Publishing past the lease could race the relay that rescued the
		// rows, so the publish ends with the lease at the latest.
		pubCtx, cancel := context.WithTimeout(r.pubCtx, min(r.cfg.PublishTimeout, deadline.Sub(r.cfg.Clock.Now())))
		err = r.publish(pubCtx, valid)
		cancel()
		for j, e := range batchErrors(err, len(sent)) {
			errs[sent[j]] = e
		}
	}
	aborted := r.pubCtx.Err() != nil
	outage := err != nil && !isBatchError(err) && !IsPermanent(err)

	var (
		params      = CompleteParams{Token: token, Policy: r.cfg.Retry}
		release     []string
		orderBroken int
	)
	clear(failedKeys)
	for i, env := range batch {
		e := errs[i]
		k, ordered := r.orderKey(&env)
		behind := ordered && failedKeys[k]
		switch {
		case e == nil:
			if behind {
				// The publisher broke its contract: it delivered an event
				// after an earlier one of its key failed. The event is on the
				// broker, so it counts as published; say so loudly.
				orderBroken++
			}
			params.Published = append(params.Published, env.ID)
		case aborted && !IsPermanent(e):
			// Shutting down: the broker did not confirm this event, so it
			// goes back to ready at once with its attempt refunded.
			release = append(release, env.ID)
		case behind || errors.Is(e, ErrHeldBack):
			params.Failed = append(params.Failed, Failure{ID: env.ID, Error: ErrHeldBack.Error(), HeldBack: true})
		default:
			f := Failure{ID: env.ID, Error: Scrub(e.Error()), Permanent: IsPermanent(e)}
			timedOut := errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled)
			switch {
			case outage || timedOut:
				// The destination as a whole failed: claims pause.
				f.Outage, f.Delay = true, r.noteOutage(f.Error)
			case IsUnavailable(e):
				// One destination of several is down: its events wait,
				// the others' keep flowing.
				f.Outage, f.Delay = true, r.cfg.OutageBackoffCap
			default:
				f.Delay = r.cfg.Retry.Backoff(env.Attempt)
			}
			var ra RetryAfter
			if errors.As(e, &ra) && ra.RetryAfter() > f.Delay {
				f.Delay = min(ra.RetryAfter(), r.cfg.Retry.Cap)
			}
			if ordered {
				failedKeys[k] = true
				f.Park = !r.skipDead[env.Topic]
			}
			params.Failed = append(params.Failed, f)
		}
	}
	if orderBroken > 0 {
		r.log.Error("publisher delivered events after an earlier event of their key failed; per-key order is broken on the broker",
			"events", orderBroken, "claim_token", token)
	}
	if len(params.Failed) == 0 {
		r.clearOutage()
	} else {
		// An outage is logged once, when it begins and when it ends; the
		// batches it fails in between only at Debug.
		level := slog.LevelWarn
		if outage {
			level = slog.LevelDebug
		}
		r.log.Log(context.Background(), level, "publish failed", "failed", len(params.Failed), "batch_size", len(batch),
			"outage", outage, "error", params.Failed[0].Error)
	}

	if !r.cfg.Clock.Now().Before(deadline) && len(params.Published)+len(params.Failed)+len(release) > 0 {
		// Paused or starved past the lease: the token check would change
		// nothing, and the rows are the rescuer's now.
		r.log.Warn("lease expired before acknowledging; leaving the batch to the rescuer",
			"rows", len(batch), "claim_token", token)
		return
	}
	if len(params.Published) > 0 || len(params.Failed) > 0 {
		var res CompleteResult
		err := r.retryStore(deadline, "acknowledging batch", func(ctx context.Context) (err error) {
			res, err = r.cfg.Store.Complete(ctx, params)
			return err
		})
		if err == nil {
			r.stats.published.Add(int64(res.Published))
			r.stats.retried.Add(int64(res.Retried))
			r.stats.heldBack.Add(int64(res.HeldBack))
			r.stats.dead.Add(int64(len(res.Dead)))
			for _, id := range res.Dead {
				if slices.Contains(res.Parked, id) {
					r.log.Error("event dead; its key is parked until an operator requeues or discards it",
						"event_id", id, "error", lastErrorOf(params.Failed, id))
				} else {
					r.log.Error("event dead", "event_id", id, "error", lastErrorOf(params.Failed, id))
				}
			}
			done := res.Published + res.Retried + res.HeldBack + len(res.Dead)
			lost := len(params.Published) + len(params.Failed) - done
			if lost > 0 {
				r.log.Warn("lease lost before acknowledgement; rows belong to another relay now", "rows", lost, "claim_token", token)
			}
			// Describing the batch costs a map and copies: only for a
			// real observer.
			if _, none := r.cfg.Observer.(nopObserver); !none {
				r.cfg.Observer.Acknowledged(acknowledgement(batch, params, res, lost))
			}
		}
	}
	if len(release) > 0 {
		var n int
		err := r.retryStore(deadline, "releasing rows", func(ctx context.Context) (err error) {
			n, err = r.cfg.Store.Release(ctx, token, release)
			return err
		})
		if err == nil {
			r.stats.released.Add(int64(n))
		}
	}
}

// orderKey returns the key that orders env and whether it is ordered at all:
// not when the relay or the event's topic is unordered, or the key is empty.
func (r *Relay) orderKey(env *Envelope) (string, bool) {
	if r.cfg.Unordered || env.Key == "" || r.unordered[env.Topic] {
		return "", false
	}
	return env.Topic + "\x00" + env.Key, true
}

// publish calls the publisher. A panic in it fails the batch's events (an
// attempt each) instead of taking down the relay and everything it relays.
func (r *Relay) publish(ctx context.Context, batch []Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			errs := make([]error, len(batch))
			for i := range errs {
				errs[i] = fmt.Errorf("publisher panicked: %v", p)
			}
			err = &BatchError{Errs: errs}
		}
	}()
	return r.cfg.Publisher.Publish(ctx, batch)
}

// retryStore runs op until it succeeds or the deadline passes. A database
// restart makes a few attempts fail; the pool reconnects meanwhile.
func (r *Relay) retryStore(deadline time.Time, what string, op func(context.Context) error) error {
	delay := 50 * time.Millisecond
	for {
		// Once Stop has given up waiting, the store gets a short grace
		// instead of the rest of the lease: rows it cannot release now are
		// rescued when their lease expires, and Stop returns.
		if at := r.abortedAt.Load(); at != 0 {
			if grace := time.Unix(0, at).Add(abortGrace); grace.Before(deadline) {
				deadline = grace
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), deadline.Sub(r.cfg.Clock.Now()))
		err := op(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if deadline.Sub(r.cfg.Clock.Now()) < delay {
			r.log.Error(what+" failed; the rows will be rescued when their lease expires",
				"error", Scrub(err.Error()))
			return err
		}
		r.log.Warn(what+" failed; retrying", "error", Scrub(err.Error()))
		<-r.cfg.Clock.After(delay)
		delay = min(delay*2, 2*time.Second)
	}
}

// acknowledgement describes a recorded batch for the Observer. When the
// lease was lost for some rows, which ones is unknown: only the failures
// the database reported are described, and no publication.
func acknowledgement(batch []Envelope, p CompleteParams, res CompleteResult, lost int) Acknowledgement {
	a := Acknowledgement{LeaseLost: lost}
	byID := make(map[string]*Envelope, len(batch))
	for i := range batch {
		byID[batch[i].ID] = &batch[i]
	}
	if lost == 0 {
		for _, id := range p.Published {
			a.Published = append(a.Published, *byID[id])
		}
	}
	dead := setOf(res.Dead)
	parked := setOf(res.Parked)
	for _, f := range p.Failed {
		out := OutcomeRetry
		switch {
		case parked[f.ID]:
			out = OutcomeParked
		case dead[f.ID]:
			out = OutcomeDead
		case lost > 0:
			continue // retried, or another relay's now: unknown
		case f.HeldBack:
			out = OutcomeHeldBack
		case f.Outage:
			out = OutcomeOutage
		}
		a.Failed = append(a.Failed, FailedEvent{Envelope: *byID[f.ID], Outcome: out, Error: f.Error})
	}
	return a
}

func setOf(items []string) map[string]bool {
	m := make(map[string]bool, len(items))
	for _, s := range items {
		m[s] = true
	}
	return m
}

func lastErrorOf(fs []Failure, id string) string {
	for _, f := range fs {
		if f.ID == id {
			return f.Error
		}
	}
	return ""
}

func isBatchError(err error) bool {
	var be *BatchError
	return errors.As(err, &be)
}

// batchErrors spreads a Publish result over the batch.
func batchErrors(err error, n int) []error {
	errs := make([]error, n)
	if err == nil {
		return errs
	}
	var be *BatchError
	if errors.As(err, &be) && len(be.Errs) == n {
		copy(errs, be.Errs)
		return errs
	}
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// noteOutage records that the destination failed as a whole and returns how
// long to wait: doubling from the retry base up to OutageBackoffCap. Claims
// pause for that long, so an outage costs a few cheap retries, not a storm.
func (r *Relay) noteOutage(reason string) time.Duration {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	if r.outageDelay == 0 {
		r.outageErr = reason
		r.outageDelay = min(100*time.Millisecond, r.cfg.OutageBackoffCap)
		r.log.Warn("destination unreachable; pausing claims", "error", reason)
	} else if r.cfg.Clock.Now().After(r.outageUntil) {
		r.outageDelay = min(r.outageDelay*2, r.cfg.OutageBackoffCap)
	}
	r.outageUntil = r.cfg.Clock.Now().Add(r.outageDelay)
	return r.outageDelay
}

func (r *Relay) clearOutage() {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	if r.outageDelay != 0 {
		r.log.Info("destination reachable again")
	}
	r.outageDelay = 0
	r.outageUntil = time.Time{}
}

func (r *Relay) outageWait() time.Duration {
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	return r.outageUntil.Sub(r.cfg.Clock.Now())
}

// every runs fn at once and then every interval until ctx ends.
func (r *Relay) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	for {
		fn(ctx)
		select {
		case <-r.cfg.Clock.After(interval):
		case <-ctx.Done():
			return
		}
	}
}

func (r *Relay) rescue(ctx context.Context) {
	const limit = 1000
	for ctx.Err() == nil {
		n, err := r.cfg.Store.RescueExpired(ctx, limit)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("rescuing expired leases failed", "error", Scrub(err.Error()))
			}
			return
		}
		if n > 0 {
			r.stats.rescued.Add(int64(n))
			r.cfg.Observer.Rescued(n)
			r.log.Info("lease rescued", "rows", n)
		}
		if n < limit {
			return
		}
	}
}

func (r *Relay) cleanup(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.cfg.Store.DeletePublished(ctx, r.cfg.Retention, r.cfg.CleanupBatchSize)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("retention cleanup failed", "error", Scrub(err.Error()))
			}
			return
		}
		r.stats.deleted.Add(int64(n))
		if n > 0 {
			r.log.Debug("retention deleted published rows", "rows", n)
		}
		if n < r.cfg.CleanupBatchSize {
			return
		}
	}
}
