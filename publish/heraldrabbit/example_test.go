package heraldrabbit_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// A relay in a service, publishing its PostgreSQL outbox to a RabbitMQ
// exchange (routing key = topic). The publisher owns its connections: it
// dials with the DialFunc, as often as it must reconnect, so the service
// hands it the dialing (URI, TLS, credentials) rather than a connection.
// It needs live servers, so it is compiled, not run.
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

	dial, err := heraldrabbit.Dialer("amqp://herald@localhost:5672/", amqp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	pub, err := heraldrabbit.New(dial, &heraldrabbit.Config{Exchange: "events"})
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
