package heraldtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldtest"
)

// placeOrder is the code under test: a handler that writes an order and
// the event that announces it in the caller's transaction.
func placeOrder(ctx context.Context, tx *sql.Tx, outbox *herald.Writer[*sql.Tx], id string, total int) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, id, total); err != nil {
		return err
	}
	return outbox.WriteTx(ctx, tx, herald.Message{
		Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: id,
		Payload: fmt.Appendf(nil, `{"id":%q,"total":%d}`, id, total),
	})
}

// openShop opens a SQLite file in dir with the outbox and an orders table.
func openShop(dir string) (*sql.DB, *heraldsqlite.Driver) {
	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	return db, store
}

// printT stands in for a test's *testing.T, which an example does not
// have: it prints what a failed assertion reports.
type printT struct{}

func (printT) Helper() {}

func (printT) Fatalf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }

// A test of a handler asserts on the events its transaction wrote while the
// transaction is still open, then that a rollback leaves none.
func ExampleRequireWrittenTx() {
	var t heraldtest.TB = printT{} // in a test: the *testing.T
	dir, _ := os.MkdirTemp("", "heraldtest-example-")
	defer os.RemoveAll(dir)
	db, store := openShop(dir)
	defer db.Close()
	ctx := context.Background()
	outbox, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	reader, err := heraldsqlite.NewReader(nil) // same Config as the writer
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := placeOrder(ctx, tx, outbox, "order-1", 4200); err != nil {
		log.Fatal(err)
	}
	rows := heraldtest.RequireWrittenTx(ctx, t, reader, tx, heraldtest.Event{
		Topic: "orders.placed", Key: "order-1", Type: "order.placed",
		JSON: `{"total": 4200, "id": "order-1"}`, // compared as JSON
	})
	fmt.Println("written:", rows[0].Topic, rows[0].Key, string(rows[0].Payload))

	if err := tx.Rollback(); err != nil {
		log.Fatal(err)
	}
	heraldtest.RequireNotWritten(ctx, t, store, heraldtest.Event{Topic: "orders.placed"})
	fmt.Println("after the rollback: no event")
	// Output:
	// written: orders.placed order-1 {"id":"order-1","total":4200}
	// after the rollback: no event
}

// A Recorder stands in for the broker behind a real relay. Here it refuses
// one event once; the relay retries it, and the test waits for both
// deliveries instead of sleeping.
func ExampleRecorder() {
	var t heraldtest.TB = printT{} // in a test: the *testing.T
	dir, _ := os.MkdirTemp("", "heraldtest-example-")
	defer os.RemoveAll(dir)
	db, store := openShop(dir)
	defer db.Close()
	ctx := context.Background()
	outbox, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, o := range []struct {
		id    string
		total int
	}{{"order-1", 4200}, {"order-2", 990}} {
		if err := placeOrder(ctx, tx, outbox, o.id, o.total); err != nil {
			log.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	rec := &heraldtest.Recorder{}
	rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "order-2"}.Matches, Times: 1})
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store:     store,
		Publisher: rec,
		Logger:    slog.New(slog.DiscardHandler),
		Retry:     herald.RetryPolicy{Base: 10 * time.Millisecond}, // retry soon, for the example
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := rec.WaitPublished(waitCtx, 2); err != nil {
		log.Fatal(err)
	}
	if err := relay.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	for _, res := range rec.Results() {
		fmt.Println(res.Envelope.Key, "attempt", res.Envelope.Attempt, "error:", res.Err)
	}
	rec.RequirePublished(t,
		heraldtest.Event{Topic: "orders.placed", Key: "order-1"},
		heraldtest.Event{Topic: "orders.placed", Key: "order-2", JSON: `{"id":"order-2","total":990}`},
	)
	// Output:
	// order-1 attempt 1 error: <nil>
	// order-2 attempt 1 error: heraldtest: injected failure
	// order-2 attempt 2 error: <nil>
}
