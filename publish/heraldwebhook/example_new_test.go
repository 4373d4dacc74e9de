package heraldwebhook_test

import (
	"log"
	"os"

	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// The publisher from its Config: one endpoint per topic, signed with the
// secret the receiver shares. Publishing needs the receiver, so it is
// compiled, not run.
func ExampleNew() {
	pub, err := heraldwebhook.New(&heraldwebhook.Config{
		Endpoints: map[string]heraldwebhook.Endpoint{"orders.placed": {URL: "https://hooks.partner.example/orders"}},
		Secret:    os.Getenv("WEBHOOK_SECRET"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
}
