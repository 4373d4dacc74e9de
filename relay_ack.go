package herald

import (
	"context"
	"time"
)

// acknowledge writes a batch's decision down in one Complete call, then
// counts, logs and reports what the database changed.
func (r *Relay) acknowledge(c claimed, d decision) {
	p := d.Params
	p.Token, p.Delete = c.token, r.cfg.DeleteOnPublish
	if len(p.Published)+len(p.Failed) == 0 {
		return
	}
	if !r.cfg.Clock.Now().Before(c.deadline) {
		// Paused or starved past the lease: the token check would change
		// nothing, and the rows are the rescuer's now.
		r.log.Warn("lease expired before acknowledging; leaving the batch to the rescuer",
			"rows", len(c.batch), "claim_token", c.token)
		return
	}
	var (
		res      CompleteResult
		attempts int
	)
	err := r.retryStore(c.deadline, "acknowledging batch", []any{"rows", len(c.batch), "claim_token", c.token}, func(ctx context.Context) (err error) {
		attempts++
		res, err = r.cfg.Store.Complete(ctx, p)
		return err
	})
	if err != nil {
		return
	}
	changed := setOf(res.Failed)
	r.count(p, res, changed)
	lost := len(p.Published) + len(p.Failed) - res.Published - len(res.Failed)
	switch {
	case lost > 0 && attempts > 1:
		// An earlier attempt may have committed before its answer was
		// lost: then these rows are already written down, not lost.
		r.log.Warn("acknowledgement retried; rows it no longer changed were written by an earlier attempt or rescued",
			"rows", lost, "claim_token", c.token)
	case lost > 0:
		r.log.Warn("lease lost before acknowledgement; rows belong to another relay now", "rows", lost, "claim_token", c.token)
	}
	// Describing the batch costs a map and copies: only for an observer
	// that listens.
	if h := r.hooks.acknowledged; h != nil {
		h.Acknowledged(acknowledgement(c.batch, p, changed, lost))
	}
}

// count adds what the database changed to the relay's counters and logs
// every event that became dead.
func (r *Relay) count(p CompleteParams, res CompleteResult, changed map[string]bool) {
	r.stats.published.Add(int64(res.Published))
	for _, f := range p.Failed {
		if !changed[f.ID] {
			continue
		}
		switch f.Outcome {
		case OutcomeRetry, OutcomeOutage:
			r.stats.retried.Add(1)
		case OutcomeHeldBack:
			r.stats.heldBack.Add(1)
		case OutcomeReleased:
			r.stats.released.Add(1)
		case OutcomeDead:
			r.stats.dead.Add(1)
			r.log.Error("event dead", "event_id", f.ID, "error", f.Error)
		case OutcomeParked:
			r.stats.dead.Add(1)
			r.log.Error("event dead; its key is parked until an operator requeues or discards it",
				"event_id", f.ID, "error", f.Error)
		}
	}
}

// retryStore runs op until it succeeds or the deadline passes. A database
// restart makes a few attempts fail; the pool reconnects meanwhile.
func (r *Relay) retryStore(deadline time.Time, what string, attrs []any, op func(context.Context) error) error {
	delay := 50 * time.Millisecond
	for {
		// Once Stop has given up waiting, the store gets a short grace
		// instead of the rest of the lease: rows it cannot release now are
		// rescued when their lease expires, and Stop returns.
		if at := r.abortedAt.Load(); at != 0 {
			if grace := time.Unix(0, at).Add(r.cfg.StopGrace); grace.Before(deadline) {
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
				append(attrs, "error", Scrub(err.Error()))...)
			return err
		}
		r.log.Warn(what+" failed; retrying", append(attrs, "error", Scrub(err.Error()))...)
		<-r.cfg.Clock.After(delay)
		delay = min(delay*2, 2*time.Second)
	}
}

// acknowledgement describes a recorded batch for the Observer. When the
// lease was lost for some rows, which published ones is unknown: only the
// failures the database changed are described, and no publication.
func acknowledgement(batch []Envelope, p CompleteParams, changed map[string]bool, lost int) Acknowledgement {
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
	for _, f := range p.Failed {
		if !changed[f.ID] || f.Outcome == OutcomeReleased {
			continue
		}
		a.Failed = append(a.Failed, FailedEvent{Envelope: *byID[f.ID], Outcome: f.Outcome, Error: f.Error})
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
