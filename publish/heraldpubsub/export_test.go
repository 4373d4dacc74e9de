package heraldpubsub

import (
	"log/slog"

	"cloud.google.com/go/pubsub/v2"

	"github.com/herald-outbox/herald"
)

// Message exposes the message and topic ID Publish sends for an event,
// with the default Config, for the fuzz tests.
func Message(env *herald.Envelope) (*pubsub.Message, string, error) {
	p := &Publisher{maxBytes: DefaultMaxMessageBytes, log: slog.New(slog.DiscardHandler)}
	return p.message(env)
}

// Classify exposes how Publish reports an error of the client for an event.
func Classify(err error) error {
	out, _ := classify(&herald.Envelope{}, "project", "topic", err)
	return out
}

// Pending returns how many messages of an ordering key of a topic p has
// handed to the client without an answer yet.
func Pending(p *Publisher, topicID, key string) int {
	p.keys.mu.Lock()
	defer p.keys.mu.Unlock()
	if st := p.keys.keys[keyRef{topic: topicID, key: key}]; st != nil {
		return st.pending
	}
	return 0
}
