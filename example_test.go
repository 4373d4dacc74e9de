package herald_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

// openShop opens a SQLite file with the outbox and an orders table, for the
// examples. SQLite runs anywhere; PostgreSQL works the same way through
// driver/heraldpg.
func openShop(dir string) (*sql.DB, *heraldsqlite.Driver) {
	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	return db, store
}

// The event is part of the business transaction: it exists if and only if
// the order does.
func Example_writeInTransaction() {
	dir, _ := os.MkdirTemp("", "herald-example-")
	defer os.RemoveAll(dir)
	db, store := openShop(dir)
	defer db.Close()
	ctx := context.Background()
	outbox, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}

	placeOrder := func(id string, total int, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, id, total); err != nil {
			log.Fatal(err)
		}
		err = outbox.WriteTx(ctx, tx, herald.Message{
			Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: id,
			Payload: fmt.Appendf(nil, `{"total":%d}`, total),
		})
		if err != nil {
			log.Fatal(err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				log.Fatal(err)
			}
		}
	}
	placeOrder("order-1", 4200, true)
	placeOrder("order-2", 990, false) // rolled back: no order, no event

	st, err := store.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, ts := range st.Topics {
		fmt.Println(ts.Topic, ts.State, ts.Count)
	}
	// Output: orders.placed ready 1
}

// A relay publishes committed events; the publisher here prints them. A
// service that writes and relays in one process may call Wake after a
// commit instead of waiting for the next poll.
func Example_relay() {
	dir, _ := os.MkdirTemp("", "herald-example-")
	defer os.RemoveAll(dir)
	db, store := openShop(dir)
	defer db.Close()
	ctx := context.Background()
	outbox, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for i, total := range []int{4200, 990} {
		if err := outbox.WriteTx(ctx, tx, herald.Message{
			Topic: "orders.placed", AggregateID: fmt.Sprintf("order-%d", i+1), Payload: fmt.Appendf(nil, `{"total":%d}`, total),
		}); err != nil {
			log.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	done := make(chan struct{})
	seen := 0
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store:  store,
		Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			for _, env := range batch {
				fmt.Printf("%s key=%s attempt=%d %s\n", env.Topic, env.Key, env.Attempt, env.Payload)
				if seen++; seen == 2 {
					close(done)
				}
			}
			return nil // confirmed: the relay marks them published
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-done
	if err := relay.Stop(ctx); err != nil { // finishes the acknowledgement
		log.Fatal(err)
	}
	fmt.Println("published:", relay.Stats().Published)
	// Output:
	// orders.placed key=order-1 attempt=1 {"total":4200}
	// orders.placed key=order-2 attempt=1 {"total":990}
	// published: 2
}
