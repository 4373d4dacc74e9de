package herald

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// claimLoop claims batches while a publish slot is free. Polling adapts: a
// full batch is followed by the next claim at once, a partial one by
// PollInterval, and empty claims double the wait up to IdlePollInterval.
// A failed claim (the database is unreachable) is retried with a doubling
// wait up to OutageBackoffCap.
func (r *Relay) claimLoop(ctx context.Context) {
	slots := make(chan struct{}, r.cfg.MaxInFlight)
	idle := r.cfg.PollInterval
	errDelay := r.cfg.PollInterval
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if wait := r.outageWait(); wait > 0 && !r.sleep(ctx, wait) {
			<-slots
			return
		}
		if ctx.Err() != nil {
			<-slots
			return
		}
		c, err := r.claim(ctx)
		r.noteDatabase(err)
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
			defer func() { <-slots }()
			defer r.inFlight.Add(-int64(len(c.batch)))
			r.process(c)
		}()
		if len(c.batch) < r.cfg.BatchSize && !r.sleep(ctx, r.cfg.PollInterval) {
			return
		}
	}
}

// claimed is a batch this relay holds, with what its acknowledgement needs.
type claimed struct {
	token string
	batch []Envelope
	// deadline is when the lease ends at the earliest: past it another
	// relay may own the rows.
	deadline time.Time
}

// claim claims one batch and marks which of its events are ordered.
func (r *Relay) claim(ctx context.Context) (claimed, error) {
	token := uuid.NewString()
	// The claim runs to completion even when Stop is called meanwhile:
	// cancelling it could leave rows claimed that this relay never saw.
	// The lease starts when the database runs the claim, so its end is
	// measured from before the call: acknowledgements never plan on time
	// the lease does not have.
	claimedAt := r.cfg.Clock.Now()
	claimCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
	batch, err := r.cfg.Store.Claim(claimCtx, ClaimParams{
		Token: token, Owner: r.cfg.Owner, Limit: r.cfg.BatchSize, Lease: r.cfg.Lease,
		Unordered: r.cfg.Unordered, UnorderedTopics: r.cfg.UnorderedTopics, PerKey: r.cfg.MaxPerKey,
	})
	cancel()
	if err != nil || len(batch) == 0 {
		return claimed{token: token}, err
	}
	for i := range batch {
		env := &batch[i]
		env.Ordered = !r.cfg.Unordered && env.Key != "" && !r.unordered[env.Topic]
	}
	r.stats.claimed.Add(int64(len(batch)))
	r.inFlight.Add(int64(len(batch)))
	r.cfg.Observer.Claimed(batch)
	r.log.Debug("claimed batch", "batch_size", len(batch), "claim_token", token)
	return claimed{token: token, batch: batch, deadline: claimedAt.Add(r.cfg.Lease)}, nil
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
// Only the claim loop touches the list.
func (r *Relay) noteLostClaim(token string) {
	if len(r.lostClaims) < maxLostClaims {
		r.lostClaims = append(r.lostClaims, token)
	}
}

// releaseLostClaims returns the rows of lost claims to ready once the
// database answers again, instead of leaving them to wait for their lease.
// Releasing by token is safe either way: a claim that did not commit holds
// nothing, and one that did was never published.
func (r *Relay) releaseLostClaims(ctx context.Context) {
	for len(r.lostClaims) > 0 {
		token := r.lostClaims[0]
		releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Lease/2)
		n, err := r.cfg.Store.ReleaseClaim(releaseCtx, token)
		cancel()
		if err != nil {
			r.log.Debug("releasing a lost claim failed; will retry", "claim_token", token, "error", Scrub(err.Error()))
			return
		}
		r.lostClaims = r.lostClaims[1:]
		if n > 0 {
			r.stats.released.Add(int64(n))
			r.log.Info("released the rows of a claim whose answer was lost", "rows", n, "claim_token", token)
		}
	}
}
