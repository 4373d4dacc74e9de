package heraldbackfill

import (
	"context"
	"time"

	"github.com/herald-outbox/herald"
)

// limiter keeps a backfill under its rate: a token bucket of one batch.
// Each batch's rows are paid for after it ran (spent), pushing the time
// the next batch may start; a batch waits until then (wait). Over any
// stretch of batches the rows written are at most one batch more than
// rate × the time passed.
type limiter struct {
	clock herald.Clock
	rate  float64 // rows a second; 0 for none
	next  time.Time
}

func newLimiter(c herald.Clock, rate float64) *limiter {
	return &limiter{clock: c, rate: rate}
}

// wait returns when the next batch may start, with the time waited, or
// false when ctx ended first.
func (l *limiter) wait(ctx context.Context, _ int) (time.Duration, bool) {
	if l.rate == 0 || ctx.Err() != nil {
		return 0, ctx.Err() == nil
	}
	now := l.clock.Now()
	if l.next.IsZero() || !now.Before(l.next) {
		return 0, true
	}
	d := l.next.Sub(now)
	select {
	case <-ctx.Done():
		return l.clock.Now().Sub(now), false
	case <-l.clock.After(d):
		return d, true
	}
}

// spent pays for the rows of a batch that ran.
func (l *limiter) spent(rows int) {
	if l.rate == 0 || rows == 0 {
		return
	}
	now := l.clock.Now()
	if l.next.Before(now) {
		l.next = now
	}
	l.next = l.next.Add(time.Duration(float64(rows) / l.rate * float64(time.Second)))
}
