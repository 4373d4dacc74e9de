package herald

// Observer receives what a relay does, for metrics and tracing. The relay
// calls it from its own goroutines: methods must be safe for concurrent use
// and return quickly.
type Observer interface {
	// Claimed reports a claimed batch, before it is published.
	Claimed(batch []Envelope)
	// Acknowledged reports a batch's outcome once the database recorded it.
	Acknowledged(a Acknowledgement)
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

// nopObserver is the Observer of a relay configured without one.
type nopObserver struct{}

func (nopObserver) Claimed([]Envelope)           {}
func (nopObserver) Acknowledged(Acknowledgement) {}
func (nopObserver) Rescued(int)                  {}
