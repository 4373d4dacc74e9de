package heraldpubsub_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
)

// A relay in a service, publishing its PostgreSQL outbox to Google Cloud
// Pub/Sub (the topic "orders" as the topic ID "prod-orders", ordered by
// key). NewClient returns a client whose retries suit the relay; the
// service owns and closes it. It needs Google Cloud (or the emulator:
// EmulatorOptions), so it is compiled, not run.
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

	client, err := heraldpubsub.NewClient(ctx, "my-project") // Application Default Credentials
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	pub, err := heraldpubsub.New(client, &heraldpubsub.Config{TopicPrefix: "prod-"})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()

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
