package heraldwebhook_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// A relay POSTs each event of the outbox to its topic's endpoint, signed
// under Standard Webhooks; the receiver checks the signature with Verify
// and drops duplicates by webhook-id. The endpoint here is in process, on
// loopback, which the address guard refuses unless AllowedNetworks says so.
func Example() {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	received := make(chan string, 1)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := heraldwebhook.Verify(secret, r.Header, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		received <- r.URL.Path + " " + string(body)
	}))
	defer endpoint.Close()

	pub, err := heraldwebhook.New(&heraldwebhook.Config{
		Endpoints:       map[string]heraldwebhook.Endpoint{"orders.placed": {URL: endpoint.URL + "/hooks/orders"}},
		Secret:          secret,
		AllowedNetworks: []string{"127.0.0.0/8"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	store, done := outboxWith("orders.placed")
	defer done()
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(<-received)
	if err := relay.Stop(context.Background()); err != nil {
		log.Fatal(err)
	}
	// Output: /hooks/orders {"total":4200}
}

// outboxWith returns an outbox on a new SQLite file holding one event of
// each topic, written with plain SQL as any program may, and a function
// that closes and removes it.
func outboxWith(topics ...string) (*heraldsqlite.Driver, func()) {
	dir, err := os.MkdirTemp("", "herald-example-")
	if err != nil {
		log.Fatal(err)
	}
	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		log.Fatal(err)
	}
	for _, topic := range topics {
		if _, err := db.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES (?, 'order-42', '{"total":4200}')`, topic); err != nil {
			log.Fatal(err)
		}
	}
	return store, func() {
		db.Close()
		os.RemoveAll(dir)
	}
}
