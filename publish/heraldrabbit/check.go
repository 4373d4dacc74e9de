package heraldrabbit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

var _ heraldspec.TargetChecker = (*Publisher)(nil)

// CheckTarget reports whether the broker holds what the events of topic
// are published to, by passive declares on a channel of its own, which
// create nothing. On a named exchange (Config.Exchange) it checks the
// exchange; which queues its bindings route the routing key to is not
// visible over AMQP, and is not checked. On the default exchange ("") it
// checks the queue named by the routing key (Config.RoutingKey of an
// event of that topic), where the default exchange sends it. A missing
// exchange or queue is an error. A route's pattern, or the topics no
// route names (""), name no single queue: on the default exchange they
// are not checked.
func (p *Publisher) CheckTarget(ctx context.Context, topic string) (heraldspec.Finding, error) {
	ok := func(msg string) (heraldspec.Finding, error) {
		return heraldspec.Finding{Severity: heraldspec.SeverityOK, Message: msg}, nil
	}
	key := ""
	if p.exchange == "" {
		if topic == "" || strings.ContainsAny(topic, "*>") {
			return ok("not checked: on the default exchange each routing key needs a queue of its name, and these are not known ahead")
		}
		key = p.routingKey(&herald.Envelope{Message: herald.Message{Topic: topic}})
	}
	if !p.conns.enter() {
		return heraldspec.Finding{}, errors.New("heraldrabbit: the publisher is closed")
	}
	defer p.conns.exit()
	c, err := p.conns.acquire(ctx)
	if err != nil {
		return heraldspec.Finding{}, err
	}
	// A passive declare of what does not exist closes its channel: not
	// one of the publisher's.
	ch, err := c.conn.Channel()
	p.conns.release(c)
	if err != nil {
		return heraldspec.Finding{}, fmt.Errorf("heraldrabbit: opening a channel: %w", err)
	}
	defer func() { _ = ch.Close() }()

	if p.exchange != "" {
		err := ch.ExchangeDeclarePassive(p.exchange, amqp.ExchangeDirect, false, false, false, false, nil)
		switch {
		case err == nil:
			return ok(fmt.Sprintf("exchange %s exists (which queues its bindings route the events to is not checked)", p.exchange))
		case notFound(err):
			return heraldspec.Finding{Severity: heraldspec.SeverityError,
				Message: fmt.Sprintf("exchange %s does not exist: every event sent to it fails until it does", p.exchange),
				Fix:     fmt.Sprintf("rabbitmqadmin declare exchange name=%s type=TYPE durable=true, and bind the queues its consumers read", p.exchange)}, nil
		}
		return heraldspec.Finding{}, fmt.Errorf("heraldrabbit: checking exchange %s: %w", p.exchange, err)
	}
	q, err := ch.QueueDeclarePassive(key, false, false, false, false, nil)
	var ae *amqp.Error
	switch {
	case err == nil:
		return ok(fmt.Sprintf("queue %s exists (%d messages ready)", key, q.Messages))
	case errors.As(err, &ae) && ae.Code == amqp.ResourceLocked:
		return ok(fmt.Sprintf("queue %s exists (exclusive to another connection)", key))
	case notFound(err):
		return heraldspec.Finding{Severity: heraldspec.SeverityError,
			Message: fmt.Sprintf("no queue %s: the default exchange routes the events of topic %s nowhere, and the broker returns them", key, topic),
			Fix:     fmt.Sprintf("rabbitmqadmin declare queue name=%s durable=true", key)}, nil
	}
	return heraldspec.Finding{}, fmt.Errorf("heraldrabbit: checking queue %s: %w", key, err)
}

func notFound(err error) bool {
	var ae *amqp.Error
	return errors.As(err, &ae) && ae.Code == amqp.NotFound
}
