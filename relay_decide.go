package herald

import (
	"context"
	"errors"
	"time"
)

// decideRules is everything decide needs besides the batch and the
// publisher's answer. Functions stand for the relay's state (the outage
// pause, the jittered backoff) so that tests fix them.
type decideRules struct {
	Now    time.Time // the relay's clock, for MaxAge against created_at
	Policy RetryPolicy
	// Aborted: Stop gave up waiting; unconfirmed events are released.
	Aborted bool
	// Outage is the whole publish's error when it failed as a whole with
	// an ordinary error (the destination is unreachable); nil otherwise.
	Outage error
	// OutageDelay is called once, when some event failed by an outage,
	// and returns how long claims pause.
	OutageDelay func(reason string) time.Duration
	// Unavailable is the pause of an event whose destination is one of
	// several and is down (herald.Unavailable).
	Unavailable time.Duration
	// Backoff is the delay before the attempt after the given one.
	Backoff func(attempt int) time.Duration
	// SkipDead are topics whose dead events do not park their key.
	SkipDead map[string]bool
	// Resumed returns when a pause that held a topic last ended: MaxAge
	// counts from then for events written before it. Nil: no pauses.
	Resumed func(topic string) time.Time
}

// decideRules are the rules decide applies to every batch of this relay;
// whole is the publisher's error when it failed the batch as a whole.
func (r *Relay) decideRules(whole error) decideRules {
	return decideRules{
		Now:         r.cfg.Clock.Now(),
		Policy:      r.cfg.Retry,
		Aborted:     r.pubCtx.Err() != nil,
		Outage:      whole,
		OutageDelay: r.noteOutage,
		Unavailable: r.cfg.OutageBackoffCap,
		Backoff:     r.cfg.Retry.Backoff,
		SkipDead:    r.skipDead,
		Resumed:     r.resumedAt,
	}
}

// decision is the store writes for one batch and what the relay says of it.
type decision struct {
	Params CompleteParams
	// Outage: the destination failed as a whole and claims pause.
	Outage bool
	// OrderBroken counts events the publisher confirmed after an earlier
	// event of their key failed: a broken publisher contract.
	OrderBroken int
}

// decide says what becomes of each event of a batch, given the error the
// publisher returned for each (nil when confirmed). It is the one place
// where an event becomes published, retried, held back, released, dead or
// parked.
//
// In order of precedence, for an event:
//   - confirmed: published (counted as broken order when an earlier event
//     of its ordered key failed);
//   - the relay is stopping and the error is not permanent: released;
//   - an earlier event of its ordered key failed, or the publisher held it
//     back: held back, whatever its own error;
//   - otherwise it failed: dead when permanent, past MaxAge, or (unless
//     the destination was down) out of attempts; parked when dead on an
//     ordered key of a topic that parks; else an outage or a retry.
func decide(batch []Envelope, errs []error, r decideRules) decision {
	var (
		d          decision
		failedKeys map[TopicKey]bool
		outageWait time.Duration
	)
	d.Params.Published = make([]string, 0, len(batch))
	for i := range batch {
		env, e := &batch[i], errs[i]
		k, ordered := orderKey(env)
		behind := ordered && failedKeys[k]
		if e == nil {
			if behind {
				d.OrderBroken++
			}
			d.Params.Published = append(d.Params.Published, env.ID)
			continue
		}
		f := Failure{ID: env.ID}
		switch {
		case r.Aborted && !IsPermanent(e):
			f.Outcome = OutcomeReleased
		case behind || errors.Is(e, ErrHeldBack):
			f.Outcome, f.Error = OutcomeHeldBack, ErrHeldBack.Error()
		default:
			f.Error = Scrub(e.Error())
			f.Outcome, f.Delay = r.failure(env, e, &d, &outageWait)
			if ordered {
				if failedKeys == nil {
					failedKeys = map[TopicKey]bool{}
				}
				failedKeys[k] = true
			}
		}
		d.Params.Failed = append(d.Params.Failed, f)
	}
	return d
}

// failure decides the outcome and delay of an event that failed itself.
func (r decideRules) failure(env *Envelope, e error, d *decision, outageWait *time.Duration) (Outcome, time.Duration) {
	timedOut := errors.Is(e, context.DeadlineExceeded) || errors.Is(e, context.Canceled)
	down := (r.Outage != nil && !IsPermanent(e)) || timedOut
	var (
		out   = OutcomeRetry
		delay time.Duration
	)
	switch {
	case down:
		// The destination as a whole failed: claims pause, once per batch.
		if !d.Outage {
			d.Outage = true
			*outageWait = r.OutageDelay(Scrub(e.Error()))
		}
		out, delay = OutcomeOutage, *outageWait
	case IsUnavailable(e):
		// One destination of several is down: its events wait, the
		// others' keep flowing.
		out, delay = OutcomeOutage, r.Unavailable
	default:
		delay = r.Backoff(env.Attempt)
	}
	var ra RetryAfter
	if errors.As(e, &ra) && ra.RetryAfter() > delay {
		delay = min(ra.RetryAfter(), r.Policy.Cap)
	}
	tooOld := r.Policy.MaxAge > 0 && !env.CreatedAt.IsZero() && r.Now.Sub(r.born(env)) > r.Policy.MaxAge
	spent := out == OutcomeRetry && env.Attempt >= r.Policy.MaxAttempts
	if IsPermanent(e) || tooOld || spent {
		if env.Ordered && env.Key != "" && !r.SkipDead[env.Topic] {
			return OutcomeParked, 0
		}
		return OutcomeDead, 0
	}
	return out, delay
}

// born is when env's MaxAge starts: when it was written, or when a pause
// that held its topic ended, whichever is later. A paused event is never
// claimed, so no pause can make it dead; this keeps a long pause from
// making it dead at its first failure after the resume.
func (r decideRules) born(env *Envelope) time.Time {
	if r.Resumed != nil {
		if t := r.Resumed(env.Topic); t.After(env.CreatedAt) {
			return t
		}
	}
	return env.CreatedAt
}
