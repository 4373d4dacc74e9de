package heraldnats

// Message exposes the message Publish sends for an event, for the fuzz
// tests (CloudEvents off).
var Message = (&Publisher{}).message

// MessageSize exposes the size Publish weighs against the size caps.
var MessageSize = messageSize

// PendingBytes returns the bytes of the messages awaiting a PubAck.
func (p *Publisher) PendingBytes() int { return p.pending.inUse() }

// LostMidBatch exposes Publish's answer to a connection lost mid-batch.
func (p *Publisher) LostMidBatch(errs []error, lost error) error { return p.lostMidBatch(errs, lost) }
