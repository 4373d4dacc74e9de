package heraldroute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/herald-outbox/herald"
)

// The states of a destination's circuit breaker.
const (
	breakerClosed   = "closed"
	breakerOpen     = "open"
	breakerHalfOpen = "half-open"
)

// destination is a Destination with its limits and breaker.
type destination struct {
	name      string
	pub       herald.Publisher
	slots     chan struct{}
	timeout   time.Duration
	threshold int
	openFor   time.Duration
	log       *slog.Logger
	now       func() time.Time

	mu        sync.Mutex
	state     string
	failures  int       // failed calls in a row
	openUntil time.Time // while open
	probing   bool      // a half-open call is running
	lastErr   string    // the last failed call's error, scrubbed
	lastErrAt time.Time
}

func newDestination(d Destination, log *slog.Logger) *destination {
	dst := &destination{
		name: d.Name, pub: d.Publisher, timeout: d.Timeout, threshold: d.FailureThreshold, openFor: d.OpenFor,
		log: log.With("destination", d.Name), now: time.Now, state: breakerClosed,
	}
	maxInFlight := d.MaxInFlight
	if maxInFlight == 0 {
		maxInFlight = 4
	}
	dst.slots = make(chan struct{}, maxInFlight)
	if dst.timeout == 0 {
		dst.timeout = 10 * time.Second
	}
	if dst.threshold == 0 {
		dst.threshold = 3
	}
	if dst.openFor == 0 {
		dst.openFor = 5 * time.Second
	}
	return dst
}

// unavailableError is the error of events a destination did not take: its
// breaker is open or all its slots are busy.
type unavailableError struct {
	dest, why string
	after     time.Duration
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("heraldroute: destination %s %s", e.dest, e.why)
}

// RetryAfter implements herald.RetryAfter.
func (e *unavailableError) RetryAfter() time.Duration { return e.after }

// publish publishes envs to the destination within its limits and returns
// one error per envelope.
func (d *destination) publish(ctx context.Context, envs []herald.Envelope) []error {
	if err := d.admit(); err != nil {
		return fill(len(envs), err)
	}
	select {
	case d.slots <- struct{}{}:
	default:
		d.release(false, nil)
		return fill(len(envs), herald.Unavailable(&unavailableError{dest: d.name, why: "is busy: every publish slot is taken"}))
	}
	defer func() { <-d.slots }()

	callCtx, cancel := context.WithTimeout(ctx, d.timeout)
	err := d.pub.Publish(callCtx, envs)
	timedOut := callCtx.Err() != nil && ctx.Err() == nil
	cancel()

	// A call fails, for the breaker, when the destination as a whole did:
	// unreachable (an error that is no BatchError) or too slow. Per-event
	// errors are the events' business.
	var be *herald.BatchError
	var failed error
	if err != nil && (!errors.As(err, &be) || timedOut) {
		failed = err
	}
	d.release(true, failed)
	switch {
	case err == nil:
		return make([]error, len(envs))
	case errors.As(err, &be) && len(be.Errs) == len(envs) && !timedOut:
		return be.Errs
	case timedOut:
		err = fmt.Errorf("heraldroute: destination %s did not answer within %s: %w", d.name, d.timeout, err)
	default:
		err = fmt.Errorf("heraldroute: destination %s: %w", d.name, err)
	}
	if ctx.Err() != nil {
		// The relay gave up on the whole batch: not this destination's fault.
		return fill(len(envs), err)
	}
	return fill(len(envs), herald.Unavailable(err))
}

// admit lets a call through unless the breaker is open; once OpenFor has
// passed it lets exactly one through, half-open.
func (d *destination) admit() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch d.state {
	case breakerOpen:
		if left := d.openUntil.Sub(d.now()); left > 0 {
			return herald.Unavailable(&unavailableError{dest: d.name, why: "is down (circuit open)", after: left})
		}
		d.state = breakerHalfOpen
		d.log.Info("destination circuit half-open: probing with one call")
		fallthrough
	case breakerHalfOpen:
		if d.probing {
			return herald.Unavailable(&unavailableError{dest: d.name, why: "is being probed (circuit half-open)", after: d.openFor})
		}
		d.probing = true
	}
	return nil
}

// release records a call's outcome. called is false when the call did not
// happen after admit (no free slot).
func (d *destination) release(called bool, failed error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	probe := d.state == breakerHalfOpen && d.probing
	if probe {
		d.probing = false
	}
	if !called {
		return
	}
	if failed == nil {
		if d.state != breakerClosed {
			d.log.Info("destination up again: circuit closed")
		}
		d.state, d.failures = breakerClosed, 0
		return
	}
	d.failures++
	d.lastErr, d.lastErrAt = herald.Scrub(failed.Error()), d.now()
	if probe || (d.state == breakerClosed && d.failures >= d.threshold) {
		d.state, d.openUntil = breakerOpen, d.now().Add(d.openFor)
		d.log.Warn("destination down: circuit open; its events wait, the others go on",
			"failures_in_a_row", d.failures, "open_for", d.openFor)
	}
}

func (d *destination) status() DestinationStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	state := d.state
	if state == breakerOpen && !d.now().Before(d.openUntil) {
		state = breakerHalfOpen // the next call probes
	}
	return DestinationStatus{Name: d.name, Breaker: state, InFlight: len(d.slots), Failures: d.failures,
		LastError: d.lastErr, LastErrorAt: d.lastErrAt}
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
