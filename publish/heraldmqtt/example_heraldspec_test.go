package heraldmqtt_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldmqtt" // imported, it registers mqtt:// and mqtts://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name:    "devices",
		URL:     "mqtts://herald@broker:8883?topic-prefix=events/&topic-mapping=dots-to-slashes",
		Secrets: heraldspec.EnvSecrets("DEVICES_", nil), // DEVICES_PASSWORD or DEVICES_PASSWORD_FILE
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
