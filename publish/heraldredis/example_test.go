package heraldredis_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// A relay in a service, publishing its PostgreSQL outbox to Redis Streams
// (one stream per topic) over a go-redis client the service owns. It needs
// live servers, so it is compiled, not run.
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

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	pub, err := heraldredis.New(rdb, &heraldredis.Config{StreamPrefix: "events:", MaxLen: 1_000_000})
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
