package heraldnats

// Message exposes the message Publish sends for an event, for the fuzz
// tests.
var Message = message
