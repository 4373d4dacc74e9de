package heraldkafka_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// A relay publishes the outbox to Kafka over a franz-go client the service
// owns (NewClient: idempotent, acks=all; add TLS or SASL as kgo options);
// each event is a record of its topic, keyed by the event's key. Here the
// cluster is franz-go's in-process kfake, and the outbox a SQLite file.
func Example() {
	ctx := context.Background()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders.placed"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	client, err := heraldkafka.NewClient(cluster.ListenAddrs())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	pub, err := heraldkafka.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}

	store, done := outboxWith("orders.placed")
	defer done()
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

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders.placed"))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	rec := consumer.PollFetches(ctx).Records()[0]
	fmt.Println(rec.Topic, string(rec.Key), string(rec.Value))
	// Output: orders.placed order-42 {"total":4200}
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
		if _, err := db.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES (?, 'order-42', '{"total":4200}')`, topic); err != nil {
			log.Fatal(err)
		}
	}
	return store, func() {
		db.Close()
		os.RemoveAll(dir)
	}
}
