package heraldredis_test

import (
	"context"
	"log"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldredis" // imported, it registers redis:// and rediss://
)

// The daemon's way, from a service: heraldspec turns a destination URL
// into a publisher of this package, credentials from the environment. It
// needs a live broker, so it is compiled, not run.
func Example_heraldspec() {
	ctx := context.Background()
	pub, closePub, err := heraldspec.Open(ctx, heraldspec.Destination{
		Name:    "audit",
		URL:     "rediss://herald@redis:6380/0?maxlen=1000000",
		Secrets: heraldspec.EnvSecrets("AUDIT_", nil), // AUDIT_PASSWORD or AUDIT_PASSWORD_FILE
		Config:  &heraldredis.Config{StreamPrefix: "events:"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closePub()
	_ = pub // herald.RelayConfig{Publisher: pub}
}
