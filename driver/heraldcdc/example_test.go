package heraldcdc_test

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

// A relay that reads the outbox's inserts from PostgreSQL's write-ahead
// log instead of polling the table (what herald relay --source cdc does).
// The source opens a replication connection of its own, so it takes a DSN
// (a role with REPLICATION) rather than the service's pool. It needs
// PostgreSQL with wal_level=logical, so it is compiled, not run.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store, err := heraldpg.New(pool, nil) // failed events and the keys behind them go back to the table
	if err != nil {
		log.Fatal(err)
	}

	src, err := heraldcdc.NewSource(ctx, heraldcdc.Config{ConnString: dsn, CreateSlot: true}) // slot and publication herald_outbox
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()

	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Source: src, Publisher: publisher()})
	if err != nil {
		log.Fatal(err)
	}
	// Start makes new rows start as streamed, read from the log only, now
	// that the slot exists; a relay without a Source then refuses the
	// table. Before the CDC relay stops for good, turn that off with
	// store.StreamInserts(ctx, false) (herald source poll).
	_ = relay // Start(ctx) and Stop(shutdownCtx) as the service starts and stops
}

// publisher stands for the service's publisher: heraldnats.New(nc, nil) and
// the like.
func publisher() herald.Publisher {
	return herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error { return nil })
}
