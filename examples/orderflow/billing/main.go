// Command billing is the billing service of the orderflow example. It
// consumes order.placed events from NATS JetStream and writes one invoice
// per event, however many times the event is delivered: the invoice and the
// inbox record of the event commit in one transaction (heraldinbox). See
// ../README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "billing:", err)
		}
		os.Exit(1)
	}
}

// run consumes until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("billing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL `URL`")
	schema := fs.String("schema", "orderflow", "`schema` of the invoices and inbox tables")
	natsURL := fs.String("nats", "nats://127.0.0.1:4222", "NATS server `URL`")
	replay := fs.Bool("replay", false, "read every order.placed event in the stream again, through a temporary consumer, to watch the inbox skip them")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))

	pool, err := pgxpool.New(ctx, *dsn)
	if err != nil {
		// pgx can quote the DSN, password included, in its parse error.
		return fmt.Errorf("opening the database: %s", herald.Scrub(err.Error()))
	}
	defer pool.Close()
	b, err := newBilling(pool, *schema, log)
	if err != nil {
		return err
	}
	if err := b.migrate(ctx); err != nil {
		return err
	}

	nc, err := nats.Connect(*natsURL, nats.Name("orderflow-billing"), nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connecting to NATS: %s", herald.Scrub(err.Error()))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	stream, err := ensureStream(ctx, js)
	if err != nil {
		return err
	}
	cfg := consumerConfig()
	if *replay {
		cfg = replayConfig()
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("creating the consumer: %w", err)
	}
	log.Info("billing consuming", "stream", streamName, "consumer", cons.CachedInfo().Name,
		"subject", subjectPlaced, "schema", *schema)
	if err := b.consume(ctx, cons); err != nil {
		return err
	}
	log.Info("shutting down")
	return nil
}
