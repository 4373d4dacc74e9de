package heraldwebhook_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldwebhook" // imported, it registers http:// and https://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name:    "partner",
		URL:     "https://hooks.partner.example/herald",
		Secrets: heraldspec.EnvSecrets("PARTNER_", nil), // PARTNER_SECRET, PARTNER_PREVIOUS_SECRET (or their _FILE)
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
