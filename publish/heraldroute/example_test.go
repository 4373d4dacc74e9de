package heraldroute_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/publish/heraldroute"
)

// A router sends each topic to its destination, each with its own limits
// and circuit breaker: orders.* to one publisher, everything else to the
// default. Real destinations are heraldnats, heraldkafka... publishers; here
// they report what they receive.
func Example() {
	ctx := context.Background()
	store, done := outboxWith("orders.placed", "users.signed_up")
	defer done()
	got := make(chan string, 2)
	destination := func(name string) herald.PublisherFunc {
		return func(ctx context.Context, batch []herald.Envelope) error {
			for _, env := range batch {
				got <- name + " <- " + env.Topic
			}
			return nil
		}
	}
	natsPub, kafkaPub := destination("events"), destination("kafka")
	router, err := heraldroute.New(&heraldroute.Config{
		Destinations: []heraldroute.Destination{
			{Name: "events", Publisher: natsPub},
			{Name: "kafka", Publisher: kafkaPub, MaxInFlight: 4, Timeout: 10 * time.Second},
		},
		Routes: []heraldroute.Route{
			{Topic: "orders.*", Destination: "kafka"},
			{Topic: "legacy.>", Destination: "kafka", Debezium: true}, // outbox.event.<aggregate_type>, key = aggregate id
		},
		Default: "events",
	})
	if err != nil {
		log.Fatal(err)
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: router, DestinationOf: router.DestinationOf, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	a, b := <-got, <-got
	if err := relay.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(min(a, b))
	fmt.Println(max(a, b))
	// Output:
	// events <- users.signed_up
	// kafka <- orders.placed
}

// outboxWith returns an outbox on a new SQLite file holding one event of
// each topic, written with plain SQL as any program may, and a function
// that closes and removes it.
func outboxWith(topics ...string) (*heraldsqlite.Driver, func()) {
	dir, err := os.MkdirTemp("", "herald-example-")
	if err != nil {
		log.Fatal(err)
	}
	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, topic := range topics {
		if _, err := db.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES (?, 'k', '{}')`, topic); err != nil {
			log.Fatal(err)
		}
	}
	return store, func() {
		db.Close()
		os.RemoveAll(dir)
	}
}
