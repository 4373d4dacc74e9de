package heraldnats

// Message exposes the message Publish sends for an event, for the fuzz
// tests.
var Message = message

// MessageSize exposes the size Publish weighs against the size caps.
var MessageSize = messageSize

// PendingBytes returns the bytes of the messages awaiting a PubAck.
func (p *Publisher) PendingBytes() int { return p.pending.inUse() }
