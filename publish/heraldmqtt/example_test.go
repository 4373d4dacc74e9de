package heraldmqtt_test

import (
	"context"
	"log"
	"net/url"
	"os"
	"os/signal"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// A relay in a service, publishing its PostgreSQL outbox to an MQTT 5
// broker, orders.placed as events/orders/placed. The publisher owns its
// connection: it takes autopaho's ClientConfig (servers, TLS, credentials)
// and reconnects itself. It needs live servers, so it is compiled, not run.
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

	broker, _ := url.Parse("mqtt://localhost:1883")
	pub, err := heraldmqtt.New(autopaho.ClientConfig{
		ServerUrls:      []*url.URL{broker},
		ConnectUsername: "herald", ConnectPassword: []byte(os.Getenv("MQTT_PASSWORD")),
	}, &heraldmqtt.Config{TopicPrefix: "events/", TopicMapping: heraldmqtt.TopicDotsToSlashes})
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
