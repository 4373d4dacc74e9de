package herald_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql's "mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// The examples of docs/library.md, which shows each step on its own and
// leaves errors unchecked where a line is about something else. They need
// a PostgreSQL, MySQL or NATS server, so they are compiled, not run;
// Example_writeInTransaction and Example_relay run the same steps on SQLite.

// The pgx quick start: an order and its event in one transaction, then the
// relay in the same service.
func Example_libraryPgx() {
	ctx := context.Background()
	id, total, body := "o-1", 4200, []byte(`{"id":"o-1","total":4200}`)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	pool, _ := pgxpool.New(ctx, "postgres://app@db/shop")
	store, _ := heraldpg.New(pool, nil)  // table public.herald_outbox
	_ = store.Migrate(ctx)               // or `herald migrate`
	outbox, _ := heraldpg.NewWriter(nil) // *herald.Writer[pgx.Tx]

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
			return err
		}
		return outbox.WriteTx(ctx, tx, herald.Message{
			Topic:         "orders.placed",
			Type:          "order.placed",
			AggregateType: "order",
			AggregateID:   id, // also the ordering key unless Key is set
			Payload:       body,
			Headers:       map[string]string{"traceparent": tp},
		})
	})
	if err != nil {
		log.Fatal(err)
	}

	natsURL := os.Getenv("NATS_URL")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, _ := nats.Connect(natsURL, nats.MaxReconnects(-1))
	pub, _ := heraldnats.New(nc, nil) // subject = topic, Nats-Msg-Id = event id
	relay, _ := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub})
	_ = relay.Start(ctx)
	defer relay.Stop(shutdownCtx) //nolint:errcheck // finishes in-flight batches, releases the rest
}

// The same on SQLite: a file, no server.
func Example_librarySQLite() {
	ctx := context.Background()
	id, total, body := "o-1", 4200, []byte(`{"id":"o-1","total":4200}`)

	db, _ := heraldsqlite.Open("shop.db") // WAL, busy timeout, BEGIN IMMEDIATE
	store, _ := heraldsqlite.New(db, nil)
	_ = store.Migrate(ctx)                   // or `herald migrate --db sqlite:shop.db`
	outbox, _ := heraldsqlite.NewWriter(nil) // *herald.Writer[*sql.Tx]

	tx, _ := db.BeginTx(ctx, nil)
	defer tx.Rollback()
	_, _ = tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, id, total)
	if err := outbox.WriteTx(ctx, tx, herald.Message{Topic: "orders.placed", AggregateID: id, Payload: body}); err != nil {
		log.Print(err) // the deferred Rollback drops the order too
		return
	}
	_ = tx.Commit()
}

// The same on MySQL or MariaDB, with go-sql-driver/mysql.
func Example_libraryMySQL() {
	ctx := context.Background()

	db, _ := sql.Open("mysql", "app:secret@tcp(db:3306)/shop")
	store, _ := heraldmysql.New(db, nil)    // table herald_outbox of the DSN's database
	_ = store.Migrate(ctx)                  // or `herald migrate --db mysql://app:secret@db:3306/shop`
	outbox, _ := heraldmysql.NewWriter(nil) // *herald.Writer[*sql.Tx]
	_ = outbox
}

// A consumer of JetStream made idempotent by the inbox: the invoice and
// the event's id commit together, so a redelivery is skipped.
func Example_libraryInbox() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	amount := 4200

	ib, _ := heraldinbox.NewPostgres(nil) // table public.herald_inbox; NewSQLite for SQLite
	_ = ib.MigratePgx(ctx, pool)

	handle := func(msg jetstream.Msg) error {
		ev, err := heraldnats.ParseJetStream(msg) // id, topic, key, type, aggregate, payload, headers
		if err != nil {
			return err // not an event of Herald's
		}
		processed, err := ib.ProcessPgx(ctx, pool, "billing", ev.ID, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2)`, ev.AggregateID, amount)
			return err
		})
		// processed == false: a duplicate, skipped without running the handler.
		// err != nil: nothing was recorded; ack nothing and let the broker redeliver.
		if err != nil {
			return err
		}
		if !processed {
			log.Printf("event %s: a duplicate, skipped", ev.ID)
		}
		return msg.Ack()
	}
	_ = handle // the consumer's callback: consumer.Consume(func(msg jetstream.Msg) { ... handle(msg) ... })
}
