package herald

import "fmt"

// Observer is what RelayConfig.Observer holds: a value that implements one
// or more of the hook interfaces, [ClaimedHook], [AcknowledgedHook] and
// [RescuedHook], and is told of those events only. NewRelay finds the
// hooks once, by type assertion, and refuses a value that implements none
// of them. An observer implements just the events it needs; because each
// hook is an interface of its own, a later Herald can add one without
// breaking the observers written before it.
//
// The relay calls the hooks from its own goroutines: they must be safe for
// concurrent use and return quickly.
type Observer any

// ClaimedHook is the hook of an [Observer] told of each claimed batch.
type ClaimedHook interface {
	// Claimed reports a claimed batch, before it is published. The relay
	// owns batch: read it during the call, do not keep it.
	Claimed(batch []Envelope)
}

// AcknowledgedHook is the hook of an [Observer] told of each batch's
// recorded outcome.
type AcknowledgedHook interface {
	// Acknowledged reports a batch's outcome once the database recorded it.
	Acknowledged(a Acknowledgement)
}

// RescuedHook is the hook of an [Observer] told of the rows the rescuer
// returned to ready.
type RescuedHook interface {
	// Rescued reports rows returned to ready after their relay's lease
	// expired.
	Rescued(n int)
}

// Acknowledgement is the recorded outcome of one batch.
type Acknowledgement struct {
	// Published are the events the broker confirmed.
	Published []Envelope
	// Failed are the events that were not delivered, with what happens to
	// them now.
	Failed []FailedEvent
	// LeaseLost counts rows the acknowledgement no longer owned: another
	// relay had rescued them. Published and Failed leave them out.
	LeaseLost int
}

// FailedEvent is an event that was not delivered.
type FailedEvent struct {
	Envelope
	Outcome Outcome // never OutcomePublished
	Error   string  // scrubbed of secrets
}

// hooks are the hooks a relay's Observer implements, found once in
// NewRelay so that an event costs no type assertion. A nil field is a hook
// the observer does not implement: the relay skips that event, and skips
// the work of describing it too.
type hooks struct {
	claimed      ClaimedHook
	acknowledged AcknowledgedHook
	rescued      RescuedHook
}

func hooksOf(o Observer) hooks {
	var h hooks
	h.claimed, _ = o.(ClaimedHook)
	h.acknowledged, _ = o.(AcknowledgedHook)
	h.rescued, _ = o.(RescuedHook)
	return h
}

// validateObserver refuses an observer that would never be called: most
// likely a hook whose method name or signature is wrong, which would
// otherwise go unnoticed.
func validateObserver(o Observer) error {
	if h := hooksOf(o); o == nil || h.claimed != nil || h.acknowledged != nil || h.rescued != nil {
		return nil
	}
	return fmt.Errorf("herald: RelayConfig.Observer (%T) implements none of herald.ClaimedHook, herald.AcknowledgedHook, herald.RescuedHook", o)
}
