package heraldpubsub_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldpubsub" // imported, it registers pubsub://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name: "gcp",
		URL:  "pubsub://my-project?prefix=prod-",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
