package herald

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Publisher delivers a batch of committed events to a broker.
//
// Publish returns nil only when the broker has confirmed every envelope
// (a JetStream PubAck, a Kafka acks=all response, a publisher confirm). A
// publisher that cannot confirm delivery must not return nil.
//
// To report per-envelope results, return a *BatchError. Any other error
// applies to the whole batch and is taken as the destination being
// unavailable: the relay backs off and retries the batch without spending
// the events' attempts (max age still applies). Wrap an error with
// Permanent to send an event straight to the dead letters.
//
// Events of one key appear in the batch in the order they must reach the
// broker. For an ordered event (Envelope.Ordered), a publisher delivers the
// events of its key in that order, and never delivers one after an earlier
// event of the same key in the same batch failed: it reports such later
// events with an error wrapping ErrHeldBack, without sending them. The
// relay sends them again behind the failed event. SendInRounds implements
// this rule; every publisher of this module uses it. Events that are not
// ordered may be sent in any order and are never held back.
//
// Publish must honour ctx: when it is cancelled, return promptly. The relay
// calls Publish from several goroutines at once.
type Publisher interface {
	Publish(ctx context.Context, batch []Envelope) error
}

// ErrHeldBack is the error a publisher reports for an event it did not send
// because an earlier event of the same key in the batch failed.
var ErrHeldBack = errors.New("herald: held back behind an earlier failed event of its key")

// PublisherFunc adapts a function to the Publisher interface.
type PublisherFunc func(ctx context.Context, batch []Envelope) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, batch []Envelope) error { return f(ctx, batch) }

// Headers a publisher sets from the event's own fields. Producers cannot set
// them (every Herald-* name is reserved).
const (
	HeaderID            = "Herald-Id"
	HeaderType          = "Herald-Type"
	HeaderKey           = "Herald-Key"
	HeaderAggregateType = "Herald-Aggregate-Type"
	HeaderAggregateID   = "Herald-Aggregate-Id"
	HeaderTopic         = "Herald-Topic"
)

// BatchError reports a result per envelope: Errs[i] is the error of
// batch[i], nil where it was confirmed.
type BatchError struct {
	Errs []error
}

func (e *BatchError) Error() string {
	failed := 0
	var first error
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			failed++
		}
	}
	return fmt.Sprintf("herald: %d of %d events failed; first: %v", failed, len(e.Errs), first)
}

// Unwrap returns the per-envelope errors.
func (e *BatchError) Unwrap() []error { return e.Errs }

// Permanent marks err as one that retrying cannot fix (a message too large
// for the broker, a 4xx from a webhook): the event goes straight to the dead
// letters.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// Unavailable marks err as the event's destination being unreachable or
// overloaded, in a batch whose other events may be fine (one of several
// destinations is down). The event's attempt is refunded and it is retried
// after a pause, as in an outage, but the relay keeps claiming for the
// other destinations. A whole batch failing with an ordinary error needs no
// marking: that is an outage already.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err}
}

type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// IsUnavailable reports whether err, or an error it wraps, was marked
// Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// RetryAfter is implemented by errors that know when the destination wants
// the event again (an HTTP Retry-After, an open circuit breaker). The relay
// waits at least that long before the next attempt, within the retry
// policy's cap.
type RetryAfter interface {
	RetryAfter() time.Duration
}
