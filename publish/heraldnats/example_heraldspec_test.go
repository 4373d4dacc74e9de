package heraldnats_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldnats" // imported, it registers nats://, tls://, ws:// and wss://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name:    "orders",
		URL:     "nats://relay@nats.internal:4222",
		Secrets: heraldspec.EnvSecrets("ORDERS_", nil), // ORDERS_PASSWORD or ORDERS_PASSWORD_FILE
		Config:  &heraldnats.Config{SubjectPrefix: "prod"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
