package heraldaws_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldaws"
)

// A relay in a service, publishing its PostgreSQL outbox to one Amazon SQS
// FIFO queue (message group = the event's key) over an SQS client the
// service configured: region, credentials, endpoint, retries. SNS is the
// same with sns.NewFromConfig and NewSNS. It needs AWS, so it is compiled,
// not run.
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

	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("eu-west-1"))
	if err != nil {
		log.Fatal(err)
	}
	pub, err := heraldaws.NewSQS(sqs.NewFromConfig(awsCfg), &heraldaws.SQSConfig{
		QueueURL: heraldaws.Fixed("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo"),
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
