package herald

import "context"

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
	// HeaderEventVersion is always set (1 unless the producer said
	// otherwise); HeaderAggregateVersion only when the event has one.
	HeaderEventVersion     = "Herald-Event-Version"
	HeaderAggregateVersion = "Herald-Aggregate-Version"
	// HeaderBackfill marks an event that a backfill wrote (heraldbackfill),
	// not a live producer: its value is the backfill's name. It travels
	// from the event's headers, where only a backfill puts it (producers
	// cannot: the name is reserved), so that consumers can tell the
	// current state of a row replayed from the state a live change wrote.
	HeaderBackfill = "Herald-Backfill"
)
