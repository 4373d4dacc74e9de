package herald

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// claimLoop claims batches while a publish slot is free; ClaimConcurrency
// loops share the slots. Polling adapts: a full batch is followed by the
// next claim at once, a partial one by PollInterval, and empty claims
// double the wait up to IdlePollInterval. A failed claim (the database is
// unreachable) is retried with a doubling wait up to OutageBackoffCap; one
// that ran out of time is retried for half as many rows, so that a
// database too slow for a whole batch within the claim's deadline still
// makes progress, and the batch grows back as claims succeed.
func (r *Relay) claimLoop(ctx context.Context, slots chan struct{}, lane claimLane) {
	idle := r.cfg.PollInterval
	errDelay := r.cfg.PollInterval
	limit := lane.batch
	for {
		budget, ok := r.awaitClaim(ctx, slots)
		if !ok {
			return
		}
		c, err := r.claim(ctx, budget, limit, lane.skipBacklogged)
		r.settleReservation(budget, c.bytes)
		r.noteDatabase(err)
		limit = nextLimit(err, limit, lane.batch)
		if err != nil {
			r.noteLostClaim(c.token)
			<-slots
			if !r.sleep(ctx, errDelay) {
				return
			}
			errDelay = min(errDelay*2, r.cfg.OutageBackoffCap)
			continue
		}
		errDelay = r.cfg.PollInterval
		r.releaseLostClaims(ctx)
		if len(c.batch) == 0 {
			<-slots
			if !r.sleep(ctx, idle) {
				return
			}
			idle = min(idle*2, r.cfg.IdlePollInterval)
			continue
		}
		idle = r.cfg.PollInterval
		r.batches.Add(1)
		go func() {
			defer r.batches.Done()
			defer r.release(c)
			var once sync.Once
			free := func() { once.Do(func() { <-slots }) }
			defer free()
			r.process(c, free)
		}()
		if len(c.batch) < limit && !r.sleep(ctx, r.cfg.PollInterval) {
			return
		}
	}
}

// claimLane is what a claim loop claims: the relay's batches, or those of
// the fair lane (FairClaims).
type claimLane struct {
	batch          int // the rows of a full claim
	skipBacklogged bool
}

// The fair lane's claims: small, so that they are published and their
// slot free again in a few milliseconds, with a second slot so that the
// next claim runs while a batch is acknowledged.
const (
	fairLaneBatch    = 100
	fairLaneInFlight = 2
)

// fairLane is the lane a relay runs beside its batches when its Store's
// claims are fair, and false when they are not.
func (r *Relay) fairLane() (claimLane, bool) {
	if f, ok := r.cfg.Store.(FairClaims); !ok || !f.ClaimsFair() {
		return claimLane{}, false
	}
	return claimLane{batch: min(fairLaneBatch, r.cfg.BatchSize), skipBacklogged: true}, true
}

// nextLimit is the row limit of the claim after one that ended with err:
// half when it ran out of time, double (up to batchSize) when it succeeded.
func nextLimit(err error, limit, batchSize int) int {
	switch {
	case err == nil:
		return min(limit*2, batchSize)
	case errors.Is(err, context.DeadlineExceeded):
		return max(limit/2, 1)
	}
	return limit
}

// awaitClaim waits until the next claim may run: a publish slot is free,
// no outage pause holds claims, and some of MaxInFlightBytes is left. It
// returns the bytes the claim may take (0: no bound), and false, with no
// slot held, once ctx ends.
func (r *Relay) awaitClaim(ctx context.Context, slots chan struct{}) (int64, bool) {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	if wait := r.outageWait(); wait > 0 && !r.sleep(ctx, wait) {
		<-slots
		return 0, false
	}
	budget, ok := r.byteBudget(ctx)
	if !ok || ctx.Err() != nil {
		<-slots
		return 0, false
	}
	return budget, true
}

// byteBudget reserves a share of what is left of MaxInFlightBytes for the
// next claim, waiting while nothing is: some batch holds the bytes then,
// and returns them when it is done. The share is MaxInFlightBytes divided
// by MaxInFlight, so that concurrent claims split the budget rather than
// the first taking it all. It returns 0 when there is no bound, and false
// once ctx ends.
func (r *Relay) byteBudget(ctx context.Context) (int64, bool) {
	if r.cfg.MaxInFlightBytes < 0 {
		return 0, true
	}
	share := max(r.cfg.MaxInFlightBytes/int64(r.cfg.MaxInFlight), 1)
	for {
		held := r.inFlightBytes.Load()
		if left := r.cfg.MaxInFlightBytes - held; left > 0 {
			want := min(left, share)
			if r.inFlightBytes.CompareAndSwap(held, held+want) {
				return want, true
			}
			continue
		}
		select {
		case <-r.bytesFreed:
		case <-ctx.Done():
			return 0, false
		}
	}
}

// settleReservation replaces a claim's reservation by the bytes it took.
func (r *Relay) settleReservation(reserved, took int64) {
	r.inFlightBytes.Add(took - reserved)
	if took < reserved {
		r.signalFreed()
	}
}

// release gives back what a batch held of the in-flight bounds, once it is
// acknowledged or given up.
func (r *Relay) release(c claimed) {
	r.inFlight.Add(-int64(len(c.batch)))
	r.inFlightBytes.Add(-c.bytes)
	r.signalFreed()
}

// signalFreed wakes a claim loop waiting for bytes.
func (r *Relay) signalFreed() {
	select {
	case r.bytesFreed <- struct{}{}:
	default:
	}
}

// claimed is a batch this relay holds, with what its acknowledgement needs.
type claimed struct {
	token string
	batch []Envelope
	// deadline is when the lease ends at the earliest: past it another
	// relay may own the rows.
	deadline time.Time
	bytes    int64 // the batch's payload and header bytes
}

// claim claims one batch and marks which of its events are ordered.
func (r *Relay) claim(ctx context.Context, maxBytes int64, limit int, skipBacklogged bool) (claimed, error) {
	token := uuid.NewString()
	// The claim runs to completion even when Stop is called meanwhile:
	// cancelling it could leave rows claimed that this relay never saw.
	// The lease starts when the database runs the claim, so its end is
	// measured from before the call: acknowledgements never plan on time
	// the lease does not have.
	paused, err := r.pausedTopics(ctx)
	if err != nil {
		return claimed{token: token}, err
	}
	claimedAt := r.cfg.Clock.Now()
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	batch, err := r.cfg.Store.Claim(claimCtx, ClaimParams{
		Token: token, Owner: r.cfg.Owner, Limit: limit, Lease: r.cfg.Lease,
		Unordered: r.cfg.Unordered, UnorderedTopics: r.cfg.UnorderedTopics, PerKey: r.cfg.MaxPerKey,
		MaxBytes: maxBytes, PausedTopics: paused, SkipBacklogged: skipBacklogged,
	})
	cancel()
	if err != nil || len(batch) == 0 {
		return claimed{token: token}, err
	}
	if send, held := r.heldByDestination(batch); len(held) > 0 {
		if err := r.releaseHeld(ctx, token, held); err != nil {
			// The claim counts as lost: its rows are released by token
			// once the database answers (releaseLostClaims).
			return claimed{token: token}, fmt.Errorf("releasing the events of a paused destination: %w", err)
		}
		if batch = send; len(batch) == 0 {
			return claimed{token: token}, nil
		}
	}
	var bytes int64
	for i := range batch {
		env := &batch[i]
		env.Ordered = !r.cfg.Unordered && env.Key != "" && !r.unordered[env.Topic]
		bytes += envelopeBytes(env)
	}
	r.stats.claimed.Add(int64(len(batch)))
	r.inFlight.Add(int64(len(batch)))
	r.noteClaim(claimedAt)
	if h := r.hooks.claimed; h != nil {
		h.Claimed(batch)
	}
	r.log.Debug("claimed batch", "batch_size", len(batch), "claim_token", token)
	return claimed{token: token, batch: batch, deadline: claimedAt.Add(r.cfg.Lease), bytes: bytes}, nil
}

// envelopeBytes is what an event counts against MaxInFlightBytes.
func envelopeBytes(env *Envelope) int64 {
	n := len(env.Payload)
	for k, v := range env.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
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

// maxLostClaims bounds the failed claims remembered for release; the rows
// of any beyond it wait for their lease and the rescuer.
const maxLostClaims = 64

// noteLostClaim remembers a claim whose answer never came: it may have
// committed, leaving rows claimed by a token this relay holds no batch for.
func (r *Relay) noteLostClaim(token string) {
	r.lostMu.Lock()
	defer r.lostMu.Unlock()
	if len(r.lostClaims) < maxLostClaims {
		r.lostClaims = append(r.lostClaims, token)
	}
}

// releaseLostClaims returns the rows of lost claims to ready once the
// database answers again, instead of leaving them to wait for their lease.
// Releasing by token is safe either way: a claim that did not commit holds
// nothing, and one that did was never published.
func (r *Relay) releaseLostClaims(ctx context.Context) {
	for {
		r.lostMu.Lock()
		if len(r.lostClaims) == 0 {
			r.lostMu.Unlock()
			return
		}
		token := r.lostClaims[0]
		r.lostMu.Unlock()
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
		n, err := r.cfg.Store.ReleaseClaim(releaseCtx, token)
		cancel()
		if err != nil {
			r.log.Debug("releasing a lost claim failed; will retry", "claim_token", token, "error", Scrub(err.Error()))
			return
		}
		r.lostMu.Lock()
		if i := slices.Index(r.lostClaims, token); i >= 0 {
			r.lostClaims = slices.Delete(r.lostClaims, i, i+1)
		}
		r.lostMu.Unlock()
		if n > 0 {
			r.stats.released.Add(int64(n))
			r.log.Info("released the rows of a claim whose answer was lost", "rows", n, "claim_token", token)
		}
	}
}
