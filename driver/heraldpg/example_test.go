package heraldpg_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// The store and the writer work on a pgx pool the service owns: the
// writer adds events to the service's own transactions, the store is the
// relay's. The publisher (heraldnats, heraldkafka...) is left out here. It
// needs a PostgreSQL server, so it is compiled, not run.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	cfg := &heraldpg.Config{Schema: "shop"} // the table shop.herald_outbox
	store, err := heraldpg.New(pool, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // or herald migrate --schema shop
		log.Fatal(err)
	}
	outbox, err := heraldpg.NewWriter(cfg) // *herald.Writer[pgx.Tx]
	if err != nil {
		log.Fatal(err)
	}

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO shop.orders (id, total) VALUES ($1, $2)`, "42", 4200); err != nil {
			return err
		}
		return outbox.WriteTx(ctx, tx, herald.Message{Topic: "orders.placed", AggregateID: "42", Payload: []byte(`{"total":4200}`)})
	})
	if err != nil {
		log.Fatal(err)
	}

	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: publisher()})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay // Start(ctx) and Stop(shutdownCtx) as the service starts and stops
}

// publisher stands for the service's publisher: heraldnats.New(nc, nil) and
// the like.
func publisher() herald.Publisher {
	return herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error { return nil })
}
