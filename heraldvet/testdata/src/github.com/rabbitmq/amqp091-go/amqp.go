// Package amqp091 is a stub of github.com/rabbitmq/amqp091-go.
package amqp091

import "context"

type Publishing struct{ Body []byte }

type Queue struct{}

type Channel struct{}

func (ch *Channel) Publish(exchange, key string, mandatory, immediate bool, msg Publishing) error {
	return nil
}
func (ch *Channel) PublishWithContext(ctx context.Context, exchange, key string, mandatory, immediate bool, msg Publishing) error {
	return nil
}
func (ch *Channel) QueueDeclare(name string, durable, autoDelete, exclusive, noWait bool, args map[string]any) (Queue, error) {
	return Queue{}, nil
}
