package heraldmysql_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/go-sql-driver/mysql"

	// Named so because plan_test.go has a function herald.
	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
)

// On MySQL 8.0.16+ or MariaDB 10.6+, the store and the writer work on a
// *sql.DB of go-sql-driver/mysql that the service owns; the table is in the
// DSN's database. The publisher (heraldnats, heraldkafka...) is left out
// here. It needs a MySQL server, so it is compiled, not run.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app:secret@tcp(localhost:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := heraldmysql.New(db, nil) // the table shop.herald_outbox
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // or herald migrate --db mysql://...
		log.Fatal(err)
	}
	outbox, err := heraldmysql.NewWriter(nil) // *heraldpkg.Writer[*sql.Tx]
	if err != nil {
		log.Fatal(err)
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES (?, ?)`, "42", 4200); err != nil {
		log.Fatal(err)
	}
	if err := outbox.WriteTx(ctx, tx, heraldpkg.Message{Topic: "orders.placed", AggregateID: "42", Payload: []byte(`{"total":4200}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	relay, err := heraldpkg.NewRelay(&heraldpkg.RelayConfig{Store: store, Publisher: publisher()})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay // Start(ctx) and Stop(shutdownCtx) as the service starts and stops
}

// publisher stands for the service's publisher: heraldnats.New(nc, nil) and
// the like.
func publisher() heraldpkg.Publisher {
	return heraldpkg.PublisherFunc(func(ctx context.Context, batch []heraldpkg.Envelope) error { return nil })
}
