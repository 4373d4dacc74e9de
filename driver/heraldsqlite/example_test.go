package heraldsqlite_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

// A service writes its business row and its event in one transaction; a
// relay in the same process publishes the event once the transaction commits.
func Example() {
	dir, err := os.MkdirTemp("", "herald-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

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
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)`); err != nil {
		log.Fatal(err)
	}
	writer, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock, now
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (42, 4200)`); err != nil {
		log.Fatal(err)
	}
	if err := writer.WriteTx(ctx, tx, herald.Message{
		Topic: "orders", Type: "order.placed", AggregateType: "order", AggregateID: "42",
		Payload: []byte(`{"total":4200}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	published := make(chan herald.Envelope, 1)
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store:  store,
		Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			for _, env := range batch {
				published <- env
			}
			return nil
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	env := <-published
	if err := relay.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(env.Topic, env.Key, env.Type, string(env.Payload), env.Attempt)
	// Output: orders 42 order.placed {"total":4200} 1
}
