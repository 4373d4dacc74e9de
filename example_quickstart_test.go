package herald_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// The README's library quick start, whole: write an order and its event in
// one pgx transaction, and relay the events to NATS JetStream. The lines
// between the README's two snippets are only what the snippets leave to
// the reader (ctx, the order, natsURL, shutdownCtx, err);
// TestDocsGoSnippetsAreExamples checks that both snippets are here, line for
// line (the //nolint is not part of the snippet, which leaves every error
// out for brevity). It needs a PostgreSQL and a NATS server, so it is
// compiled, not run.
func Example_quickStart() {
	ctx := context.Background()
	id, total, body := "order-42", 4200, []byte(`{"total":4200}`)
	natsURL := nats.DefaultURL
	shutdownCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	pool, _ := pgxpool.New(ctx, "postgres://app@db/shop")
	store, _ := heraldpg.New(pool, nil)  // table public.herald_outbox
	_ = store.Migrate(ctx)               // or `herald migrate`
	outbox, _ := heraldpg.NewWriter(nil) // *herald.Writer[pgx.Tx]

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total); err != nil {
			return err
		}
		return outbox.WriteTx(ctx, tx, herald.Message{
			Topic:       "orders.placed",
			Type:        "order.placed",
			AggregateID: id, // also the ordering key unless Key is set
			Payload:     body,
		})
	})
	if err != nil {
		log.Fatal(err)
	}

	nc, _ := nats.Connect(natsURL, nats.MaxReconnects(-1))
	pub, _ := heraldnats.New(nc, nil) // subject = topic, Nats-Msg-Id = event id
	relay, _ := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub})
	_ = relay.Start(ctx)
	defer relay.Stop(shutdownCtx) //nolint:errcheck // finishes in-flight batches, releases the rest
}

// Any JetStream client reads what the relay publishes; the README's daemon
// quick start shows it with nats.go, the snippet in the middle here. Around
// it, in process: an outbox on SQLite with the quick start's event, a relay
// to an embedded JetStream server creating the stream ORDERS.
func Example_readTheRelayedEvent() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "herald-example-")
	defer os.RemoveAll(dir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		log.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		log.Fatal("NATS server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()

	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	// The INSERT of the daemon quick start, with an id of its own so that
	// the output is the same every run.
	if _, err := db.ExecContext(ctx, `INSERT INTO herald_outbox (id, topic, key, payload) VALUES (?, ?, ?, ?)`,
		"0192f3a0-0000-7000-8000-000000000042", "orders.placed", "order-42", `{"total":4200}`); err != nil {
		log.Fatal(err)
	}
	pub, err := heraldnats.New(nc, &heraldnats.Config{
		CreateStream: &jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		if err := relay.Stop(ctx); err != nil {
			log.Fatal(err)
		}
	}()

	js, _ := jetstream.New(nc)
	cons, _ := js.OrderedConsumer(ctx, "ORDERS", jetstream.OrderedConsumerConfig{})
	msg, _ := cons.Next()
	fmt.Println(msg.Subject(), string(msg.Data()), msg.Headers().Get("Herald-Id"))
	// Output: orders.placed {"total":4200} 0192f3a0-0000-7000-8000-000000000042
}
