// Command orders is the order service of the orderflow example. POST /orders
// writes an order row and its order.placed event into the outbox in one
// transaction: the event exists if and only if the order does. The Herald
// relay publishes the event to NATS JetStream; the billing service consumes
// it. See ../README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "orders:", err)
		}
		os.Exit(1)
	}
}

// run serves until ctx ends, then shuts the HTTP server down gracefully.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8081", "listen `address`")
	dsn := fs.String("db", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable", "PostgreSQL `URL`")
	schema := fs.String("schema", "orderflow", "`schema` of the orders and outbox tables")
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

	// The service owns its tables and its outbox; migrating both at start
	// keeps the example to one command per terminal. Both are safe to run
	// from several processes at once.
	if err := migrate(ctx, pool, *schema); err != nil {
		return err
	}
	store, err := heraldpg.New(pool, &heraldpg.Config{Schema: *schema})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	handler, err := newServer(pool, *schema, log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Tests start the service on port 0 and read the address from this line.
	log.Info("orders service listening", "addr", ln.Addr().String(), "schema", *schema)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}
