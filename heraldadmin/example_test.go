package heraldadmin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
)

// An event the broker refuses for good goes dead and parks its key; the
// key's next event waits behind it. An operator finds it, learns that
// discarding it needs an explicit resume, and requeues it instead. Every driver's store is an Admin; SQLite here.
func Example_deadLetters() {
	dir, _ := os.MkdirTemp("", "heraldadmin-example-")
	defer os.RemoveAll(dir)
	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	outbox, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range []string{"order-1", "order-2"} {
		if err := outbox.WriteTx(ctx, tx, herald.Message{Topic: "orders.placed", AggregateID: id, Payload: []byte(`{}`)}); err != nil {
			log.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	// The broker takes order-1 and refuses order-2 for good.
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		bothSent = make(chan struct{})
		once     sync.Once
	)
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store:  store,
		Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			errs := make([]error, len(batch))
			mu.Lock()
			defer mu.Unlock()
			for i, env := range batch {
				if env.Key == "order-2" {
					errs[i] = herald.Permanent(errors.New("schema rejected"))
				}
				seen[env.Key] = true
			}
			if len(seen) == 2 {
				once.Do(func() { close(bothSent) })
			}
			return herald.BatchResult(errs)
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-bothSent
	if err := relay.Stop(ctx); err != nil { // writes the outcomes down
		log.Fatal(err)
	}

	// The next event of order-2 waits behind the parked one.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.WriteTx(ctx, tx, herald.Message{Topic: "orders.placed", AggregateID: "order-2", Payload: []byte(`{}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	var admin heraldadmin.Admin = store
	dead, err := admin.ListEvents(ctx, heraldadmin.EventFilter{Topic: "orders.placed"}) // dead ones by default
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range dead {
		fmt.Printf("%s %s parked=%v: %s\n", ev.Key, ev.State, ev.Parked, ev.LastError)
	}

	_, err = admin.DiscardDead(ctx, heraldadmin.EventFilter{All: true})
	var parked *heraldadmin.ParkedError
	if errors.As(err, &parked) {
		fmt.Println("discard refused: it parks key", parked.Keys[0].Key, "with", parked.Keys[0].Waiting, "event waiting")
	}

	n, err := admin.RequeueDead(ctx, heraldadmin.EventFilter{IDs: []string{dead[0].ID}})
	if err != nil {
		log.Fatal(err)
	}
	ev, err := admin.GetEvent(ctx, dead[0].ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("requeued", n, "now", ev.State)
	// Output:
	// order-2 dead parked=true: permanent: schema rejected
	// discard refused: it parks key order-2 with 1 event waiting
	// requeued 1 now ready
}
