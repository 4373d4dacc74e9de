package heraldnats_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// A relay in a service, publishing its PostgreSQL outbox to NATS JetStream
// over a connection the service owns (TLS, credentials and reconnects are
// its own). The publisher creates the stream that captures the topics. It
// needs live servers, so it is compiled, not run; the root package's
// Example_readTheRelayedEvent runs the same against an embedded server.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := heraldpg.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}

	nc, err := nats.Connect(os.Getenv("NATS_URL"), nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	pub, err := heraldnats.New(nc, &heraldnats.Config{
		CreateStream: &jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}, Duplicates: 2 * time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}

	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done() // SIGINT
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := relay.Stop(shutdown); err != nil { // finishes in-flight batches, releases the rest
		log.Print(err)
	}
}
