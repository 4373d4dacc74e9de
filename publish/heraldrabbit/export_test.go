package heraldrabbit

import (
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
)

// Message exposes the message and routing key Publish sends for an event,
// with the default Config, for the fuzz tests.
func Message(env *herald.Envelope) (amqp.Publishing, string, error) {
	p := &Publisher{
		routingKey: func(env *herald.Envelope) string { return env.Topic },
		maxBytes:   DefaultMaxMessageBytes,
		log:        slog.New(slog.DiscardHandler),
	}
	return p.message(env, 0)
}
