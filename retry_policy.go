package herald

import (
	"errors"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides when a failed event is tried again and when it is dead.
type RetryPolicy struct {
	// Base is the delay before the first retry. Defaults to 1s.
	Base time.Duration
	// Cap is the longest delay between two attempts. Defaults to 5m.
	Cap time.Duration
	// MaxAttempts is how many failed publish attempts make an event dead.
	// Outages (a whole batch failing to reach the broker) do not count.
	// Defaults to 25.
	MaxAttempts int
	// MaxAge is how long after it was written an event may still be retried;
	// a failure after that makes it dead. Defaults to 72h.
	MaxAge time.Duration
}

// DefaultRetryPolicy returns the defaults documented on RetryPolicy.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Base: time.Second, Cap: 5 * time.Minute, MaxAttempts: 25, MaxAge: 72 * time.Hour}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.Base == 0 {
		p.Base = d.Base
	}
	if p.Cap == 0 {
		p.Cap = d.Cap
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.MaxAge == 0 {
		p.MaxAge = d.MaxAge
	}
	return p
}

func (p RetryPolicy) validate() error {
	switch {
	case p.Base < 0:
		return errors.New("herald: RetryPolicy.Base must not be negative")
	case p.Cap < p.Base:
		return errors.New("herald: RetryPolicy.Cap must not be below Base")
	case p.MaxAttempts < 1:
		return errors.New("herald: RetryPolicy.MaxAttempts must be at least 1")
	case p.MaxAge < 0:
		return errors.New("herald: RetryPolicy.MaxAge must not be negative")
	}
	return nil
}

// Backoff returns the delay before the attempt after the given one (attempt
// counts from 1): exponential from Base, capped at Cap, with "equal jitter"
// (half fixed, half random) so that events failing together spread out
// without ever retrying sooner than half the nominal delay.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.Base
	for i := 1; i < attempt && d < p.Cap; i++ {
		d *= 2
	}
	if d > p.Cap {
		d = p.Cap
	}
	half := d / 2
	if half <= 0 {
		return d
	}
	return half + rand.N(half+1)
}
