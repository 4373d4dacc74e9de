package heraldtest_test

import (
	"context"
	"errors"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldtest"
)

// Order is the code under test's order.
type Order struct {
	ID    string
	Total int
}

// ordersService is the code under test: its Place writes an order and
// its event in the caller's transaction.
type ordersService struct {
	outbox *herald.Writer[pgx.Tx]
}

func (s ordersService) Place(ctx context.Context, tx pgx.Tx, o Order) error {
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, o.ID, o.Total); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, tx, herald.Message{
		Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: o.ID,
		Payload: []byte(`{"id":"o-1","total":4200}`), Headers: map[string]string{"tenant": "acme"},
	})
}

// A test of a handler on PostgreSQL, in the transaction the test rolls
// back. The body of testPlaceOrder is what a TestPlaceOrder(t *testing.T)
// holds; it needs a PostgreSQL server, so it is compiled, not run.
// ExampleRequireWrittenTx runs the same on SQLite.
func ExampleRequireWrittenTx_postgres() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	var cfg *heraldpg.Config // the writer's
	outbox, err := heraldpg.NewWriter(cfg)
	if err != nil {
		log.Fatal(err)
	}
	orders := ordersService{outbox: outbox}
	order := Order{ID: "o-1", Total: 4200}

	testPlaceOrder := func(t *testing.T) {
		reader, _ := heraldpg.NewReader(cfg) // heraldpg.NewSQLReader for database/sql, heraldsqlite.NewReader

		tx, _ := pool.Begin(ctx)
		defer tx.Rollback(ctx)
		if err := orders.Place(ctx, tx, order); err != nil { // your handler
			t.Fatal(err)
		}
		heraldtest.RequireWrittenTx(ctx, t, reader, tx, heraldtest.Event{
			Topic:   "orders.placed",
			Key:     order.ID,
			Type:    "order.placed",
			JSON:    `{"id":"o-1","total":4200}`,         // compared as JSON; Payload compares bytes
			Headers: map[string]string{"tenant": "acme"}, // a subset
		})
		heraldtest.RequireNotWrittenTx(ctx, t, reader, tx, heraldtest.Event{Topic: "orders.cancelled"})
	}
	_ = testPlaceOrder
}

// A test of a relay with a Recorder for its broker: one event refused
// once, one refused for good. The body of testRelay is what a
// TestRelay(t *testing.T) holds; it needs a PostgreSQL server, so it is
// compiled, not run. ExampleRecorder runs the same on SQLite.
func ExampleRecorder_postgres() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := heraldpg.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	id := "0198c0de-0000-7000-8000-000000000003" // the event the partner refuses

	testRelay := func(t *testing.T) {
		rec := &heraldtest.Recorder{}
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "o-2"}.Matches, Times: 1})                                 // refused once, then retried
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{ID: id}.Matches, Err: herald.Permanent(errors.New("refused"))}) // dead
		relay, _ := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: rec})
		_ = relay.Start(ctx)
		defer relay.Stop(ctx) //nolint:errcheck
		// ... run the code under test ...
		_, err := rec.WaitPublished(ctx, 2) // waits on the deliveries, no sleep
		rec.RequirePublished(t, heraldtest.Event{Key: "o-1"}, heraldtest.Event{Key: "o-2"})

		if err != nil {
			t.Fatal(err)
		}
	}
	_ = testRelay
}
