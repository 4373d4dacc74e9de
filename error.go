package herald

import (
	"errors"
	"fmt"
	"time"
)

// ErrRelayStopped is returned by Relay.Start after the relay was stopped.
var ErrRelayStopped = errors.New("herald: relay stopped")

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

// ErrHeldBack is the error a publisher reports for an event it did not send
// because an earlier event of the same key in the batch failed.
var ErrHeldBack = errors.New("herald: held back behind an earlier failed event of its key")

// ErrNoAnswer is the error of an event sent in a round that the publisher
// neither confirmed nor failed: it was not delivered as far as Herald
// knows, and is tried again.
var ErrNoAnswer = errors.New("herald: no answer from the broker for the event")

// ErrInvalidMessage is matched by every *ValidationError.
var ErrInvalidMessage = errors.New("herald: invalid message")

// ValidationError says which message and which field was refused.
type ValidationError struct {
	Index  int    // position of the message in the WriteTx call
	Field  string // "topic", "payload", "headers[Name]", ...
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("herald: message %d: %s: %s", e.Index, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidMessage) true.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalidMessage }
