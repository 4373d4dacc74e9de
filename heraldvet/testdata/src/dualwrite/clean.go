package dualwrite

import (
	"context"
	"database/sql"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
)

// Nothing in this file is reported.

// A publish with no transaction in sight: a service that only publishes.
func (s *service) publishOnly(ctx context.Context) error {
	return s.nc.Publish("orders.placed", nil)
}

// Writes outside any transaction are not seen (autocommit statements).
func (s *service) autocommitThenPublish(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	return s.nc.Publish("orders.placed", nil)
}

// A goroutine runs later, outside the function: not seen.
func (s *service) publishInGoroutine(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	go func() { _ = s.nc.Publish("orders.placed", nil) }()
	return tx.Commit()
}

// A setup function that migrates in a transaction and registers a handler
// that publishes: the handler runs on its own, later.
func (s *service) setup(ctx context.Context, mux *http.ServeMux) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id int)`)
		return err
	})
	if err != nil {
		return err
	}
	mux.HandleFunc("/ping", func(w http.ResponseWriter, r *http.Request) {
		_ = s.nc.Publish("pings", nil)
	})
	notify := func() error { return s.nc.Publish("started", nil) }
	return notify()
}

// A publish in another function called from the transaction is not seen.
func (s *service) publishThroughHelper(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return s.announce()
	})
}

func (s *service) announce() error { return s.nc.Publish("orders.placed", nil) }

// Nor is one behind the service's own interface.
type eventBus interface {
	Publish(ctx context.Context, topic string, payload []byte) error
}

func (s *service) publishThroughInterface(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return s.events.Publish(ctx, "orders.placed", nil)
	})
}

// The SDKs' other calls in a transaction are not publishes.
func (s *service) readsAndSubscribes(ctx context.Context, tx pgx.Tx) error {
	if _, err := s.nc.Subscribe("orders.*", func(*nats.Msg) {}); err != nil {
		return err
	}
	if err := s.nc.Flush(); err != nil {
		return err
	}
	if err := s.rdb.Get(ctx, "k").Err(); err != nil {
		return nil
	}
	if _, err := s.ch.QueueDeclare("orders", true, false, false, false, nil); err != nil {
		return err
	}
	if err := s.kafka.Flush(ctx); err != nil {
		return err
	}
	_, err := s.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{})
	return err
}

// A Publish method of another package is not a broker's.
type outbox struct{}

func (outbox) Publish(topic string, payload []byte) error { return nil }

func (s *service) publishToOwnType(ctx context.Context, tx *sql.Tx) error {
	var o outbox
	return o.Publish("orders.placed", nil)
}

// A *gorm.DB is a transaction only when it came from Begin or
// Transaction: a parameter may be the plain handle.
func (s *service) gormHandle(ctx context.Context, db *gorm.DB) error {
	if err := db.Create(&struct{}{}).Error; err != nil {
		return err
	}
	return s.ch.Publish("orders", "placed", false, false, amqp.Publishing{})
}

// A Redis client is not a database transaction, whatever its commands.
func (s *service) redisOnly(ctx context.Context, rdb *redis.Client) error {
	if err := rdb.Get(ctx, "k").Err(); err != nil {
		return nil
	}
	return rdb.Publish(ctx, "orders", "placed").Err()
}
