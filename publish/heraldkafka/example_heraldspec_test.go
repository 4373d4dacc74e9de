package heraldkafka_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldkafka" // imported, it registers kafka://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name:    "kafka",
		URL:     "kafka://herald@k1:9093,kafka://k2:9093?sasl=scram-sha-512&tls=true",
		Secrets: heraldspec.EnvSecrets("KAFKA_", nil), // KAFKA_PASSWORD or KAFKA_PASSWORD_FILE
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
