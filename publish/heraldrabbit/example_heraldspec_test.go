package heraldrabbit_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldrabbit" // imported, it registers amqp:// and amqps://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name:    "billing",
		URL:     "amqps://herald@rabbit:5671/?exchange=events",
		Secrets: heraldspec.EnvSecrets("BILLING_", nil), // BILLING_PASSWORD or BILLING_PASSWORD_FILE
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
