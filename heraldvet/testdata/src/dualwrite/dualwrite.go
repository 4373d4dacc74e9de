// Package dualwrite holds the cases of the dual-write check: a publish in a
// function that also runs a database transaction.
package dualwrite

import (
	"context"
	"database/sql"

	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	confluent "github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jmoiron/sqlx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/uptrace/bun"
	"gorm.io/gorm"

	"shop/ent"
)

type service struct {
	db     *sql.DB
	dbx    *sqlx.DB
	pool   *pgxpool.Pool
	gormDB *gorm.DB
	bunDB  *bun.DB
	ent    *ent.Client
	inbox  *heraldinbox.Inbox

	nc     *nats.Conn
	js     jetstream.JetStream
	kafka  *kgo.Client
	kw     *kafka.Writer
	cp     *confluent.Producer
	ch     *amqp.Channel
	rdb    *redis.Client
	urdb   redis.UniversalClient
	sqs    *sqs.Client
	sns    *sns.Client
	events eventBus
}

// The classic dual write: commit, then publish. A crash between the two
// loses the event.
func (s *service) publishAfterCommit(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return s.nc.Publish("orders.placed", nil) // want `dual write: nats\.Conn\.Publish publishes in a function that also runs a database transaction \(sql\.DB\.BeginTx, line 53\); write the event with herald's Writer\.WriteTx`
}

// Inside the transaction's body: the event goes out even if the
// transaction then rolls back.
func (s *service) publishInBeginFunc(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
			return err
		}
		_, err := s.js.Publish(ctx, "orders.placed", nil) // want `dual write: jetstream\.Publisher\.Publish publishes .*\(pgx\.BeginFunc, line 70\)`
		return err
	})
}

func (s *service) publishAsyncInBeginFunc(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := s.js.PublishAsync("orders.placed", nil) // want `dual write: jetstream\.Publisher\.PublishAsync`
		return err
	})
}

// A function given the transaction is part of it.
func (s *service) produceWithTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `UPDATE stock SET n = n - 1`); err != nil {
		return err
	}
	return s.kafka.ProduceSync(ctx, &kgo.Record{Topic: "stock"}).FirstErr() // want `dual write: kgo\.Client\.ProduceSync .*\(parameter tx pgx\.Tx, line 87\)`
}

func (s *service) produceAfterPoolBegin(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	s.kafka.Produce(ctx, &kgo.Record{Topic: "stock"}, nil)           // want `dual write: kgo\.Client\.Produce .*\(pgxpool\.Pool\.Begin, line \d+\)`
	if err := s.kw.WriteMessages(ctx, kafka.Message{}); err != nil { // want `dual write: kafka\.Writer\.WriteMessages`
		return err
	}
	if err := s.cp.Produce(&confluent.Message{}, nil); err != nil { // want `dual write: kafka\.Producer\.Produce`
		return err
	}
	return tx.Commit(ctx)
}

func (s *service) publishInGormTransaction(ctx context.Context) error {
	return s.gormDB.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&struct{}{}).Error; err != nil {
			return err
		}
		if err := s.ch.Publish("orders", "placed", false, false, amqp.Publishing{}); err != nil { // want `dual write: amqp091\.Channel\.Publish .*\(gorm\.DB\.Transaction, line \d+\)`
			return err
		}
		return s.ch.PublishWithContext(ctx, "orders", "placed", false, false, amqp.Publishing{}) // want `dual write: amqp091\.Channel\.PublishWithContext`
	})
}

func (s *service) xaddAfterGormBegin(ctx context.Context) error {
	tx := s.gormDB.Begin()
	tx.Create(&struct{}{})
	if err := tx.Commit().Error; err != nil {
		return err
	}
	s.rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders"})   // want `dual write: redis\.cmdable\.XAdd .*\(gorm\.DB\.Begin, line \d+\)`
	s.urdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders"})  // want `dual write: redis\.StreamCmdable\.XAdd`
	return s.urdb.Publish(ctx, "orders", "placed").Err() // want `dual write: redis\.Cmdable\.Publish`
}

func (s *service) sendInBunTx(ctx context.Context) error {
	return s.bunDB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
			return err
		}
		if _, err := s.sqs.SendMessage(ctx, &sqs.SendMessageInput{}); err != nil { // want `dual write: sqs\.Client\.SendMessage .*\(bun\.DB\.RunInTx, line \d+\)`
			return err
		}
		_, err := s.sns.Publish(ctx, &sns.PublishInput{}) // want `dual write: sns\.Client\.Publish`
		return err
	})
}

func (s *service) legacyJetStreamAfterSqlx(ctx context.Context) error {
	tx := s.dbx.MustBegin()
	defer tx.Rollback()
	if _, err := tx.NamedExecContext(ctx, `INSERT INTO orders (id) VALUES (:id)`, map[string]any{"id": 1}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	js, err := s.nc.JetStream()
	if err != nil {
		return err
	}
	_, err = js.Publish("orders.placed", nil) // want `dual write: nats\.JetStream\.Publish .*\(sqlx\.DB\.MustBegin, line \d+\)`
	return err
}

func (s *service) requestAfterEntTx(ctx context.Context) error {
	tx, err := s.ent.Tx(ctx)
	if err != nil {
		return err
	}
	if err := tx.User.Create().Save(ctx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = s.nc.RequestWithContext(ctx, "billing.invoice", nil) // want `dual write: nats\.Conn\.RequestWithContext .*\(ent\.Client\.Tx, line \d+\)`
	return err
}

// A consumer that forwards an event after recording it in the inbox: the
// forwarded event should go through the outbox, in the inbox's
// transaction.
func (s *service) forwardAfterInbox(ctx context.Context, id string) error {
	processed, err := s.inbox.ProcessPgx(ctx, s.pool, "billing", id, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO invoices (id) VALUES (1)`)
		return err
	})
	if err != nil || !processed {
		return err
	}
	return s.nc.PublishMsg(&nats.Msg{Subject: "invoices.created"}) // want `dual write: nats\.Conn\.PublishMsg .*\(heraldinbox\.Inbox\.ProcessPgx, line \d+\)`
}

// withTx is the service's own helper: a literal passed to it whose
// parameter is a transaction is that transaction's body.
func withTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (s *service) publishInOwnHelper(ctx context.Context) error {
	return withTx(ctx, s.db, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
			return err
		}
		return s.nc.Publish("orders.placed", nil) // want `dual write: nats\.Conn\.Publish .*\(parameter tx \*sql\.Tx, line \d+\)`
	})
}

// A deferred literal runs before the function returns: part of it.
func (s *service) publishDeferred(ctx context.Context) error {
	defer func() {
		_ = s.nc.Publish("orders.placed", nil) // want `dual write: nats\.Conn\.Publish .*\(sql\.DB\.BeginTx, line \d+\)`
	}()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	return tx.Commit()
}

type uow struct{ tx pgx.Tx }

// A unit of work holding its transaction in a field.
func (u *uow) placeOrder(ctx context.Context, rdb *redis.Client) error {
	if _, err := u.tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	return rdb.Publish(ctx, "orders", "placed").Err() // want `dual write: redis\.cmdable\.Publish .*\(a call on u\.tx, line \d+\)`
}

type txKey struct{}

// The transaction comes from the context.
func (s *service) publishWithTxFromContext(ctx context.Context) error {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	if !ok {
		return nil
	}
	_ = tx
	return s.nc.Publish("orders.placed", nil) // want `dual write: nats\.Conn\.Publish .*\(variable tx \*sql\.Tx, line \d+\)`
}
