package main

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// Every destination kind takes --cloudevents-source; binary mode is
// refused only where the publisher has none (NATS, SQS, SNS).
func TestEveryDestinationKindTakesCloudEvents(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"webhook", "kafka", "nats", "redis", "amqp", "mqtt", "sqs", "sns", "pubsub"} {
		for _, mode := range []heraldce.Mode{"", heraldce.Binary, heraldce.Structured} {
			t.Run(kind+"_"+string(mode), func(t *testing.T) {
				t.Parallel()
				inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay")}
				source, m := "/shop", string(mode)
				df := destinationFlags{ceSource: &source, ceMode: &m}
				ce, err := df.cloudEvents(inv, []endpoint{{name: "d", kind: kind}})
				structuredOnly := kind == "nats" || kind == "sqs" || kind == "sns"
				if structuredOnly && mode == heraldce.Binary {
					require.ErrorContains(t, err, "--cloudevents-mode: destination d is")
					require.ErrorContains(t, err, "structured mode only")
					return
				}
				require.NoError(t, err)
				require.Equal(t, &heraldce.Config{Source: "/shop", Mode: mode}, ce)
			})
		}
	}
}

// A relay with --cloudevents-source sends CloudEvents to RabbitMQ and to
// Redis, as each publisher's Parse reads back.
func TestRelaySendsCloudEventsToRabbitMQAndRedis(t *testing.T) {
	t.Parallel()
	d := setup(t)
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		testenv.Unavailable(t, fmt.Sprintf("RabbitMQ is not reachable at 127.0.0.1:5672 (%v): start it with rabbitmq-server -detached", err))
	}
	t.Cleanup(func() { _ = conn.Close() })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("Redis is not reachable at 127.0.0.1:6379 (%v): start it with redis-server --daemonize yes", err))
	}
	ch, err := conn.Channel()
	require.NoError(t, err)
	queue := "herald-cli-ce-" + d.schema
	_, err = ch.QueueDeclare(queue, false, true, false, false, nil)
	require.NoError(t, err)
	stream := "herald-cli-ce-stream-" + d.schema
	t.Cleanup(func() { _ = rdb.Del(context.Background(), stream).Err() })

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, type, aggregate_id, payload) VALUES `+
		`('`+queue+`', 'k', 'order.placed', 'order-7', '{"n":1}'), ('`+stream+`', 'k', 'order.paid', 'order-7', '{"n":2}')`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, nil, nil, append([]string{"relay",
			"--destination", "rabbit=amqp://guest:guest@127.0.0.1:5672/", "--destination", "streams=redis://127.0.0.1:6379/0",
			"--route", queue + "=rabbit", "--route", stream + "=streams",
			"--cloudevents-source", "/shop/orders", "--cloudevents-mode", "structured", "--log-level", "warn"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		n, err := rdb.XLen(context.Background(), stream).Result()
		return err == nil && n == 1
	}, 30*time.Second, 20*time.Millisecond)
	var delivery amqp.Delivery
	require.Eventually(t, func() bool {
		m, ok, err := ch.Get(queue, true)
		delivery = m
		return err == nil && ok
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	r := <-done
	require.Equal(t, 0, r.code, r)

	require.Equal(t, heraldce.StructuredContentType, delivery.ContentType)
	msg, err := heraldrabbit.Parse(delivery)
	require.NoError(t, err)
	require.Equal(t, queue, msg.Topic)
	require.Equal(t, "order.placed", msg.Type)
	require.JSONEq(t, `{"n":1}`, string(msg.Payload))

	entries, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.Equal(t, heraldce.StructuredContentType, entries[0].Values[heraldredis.FieldContentType])
	msg, err = heraldredis.Parse(entries[0])
	require.NoError(t, err)
	require.Equal(t, stream, msg.Topic)
	require.Equal(t, "order-7", msg.AggregateID)
	require.JSONEq(t, `{"n":2}`, string(msg.Payload))
}
