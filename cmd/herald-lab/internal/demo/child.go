package demo

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// RunRelayChildIfAsked runs the demo's relay and exits when this process was
// started as the demo's relay child; otherwise it returns at once. Programs
// that run the demo (herald-lab, the demo's tests) call it first.
func RunRelayChildIfAsked() {
	if os.Getenv(childEnv) == "" {
		return
	}
	if err := runRelayChild(); err != nil {
		fmt.Fprintln(os.Stderr, "herald-lab demo relay:", herald.Scrub(err.Error()))
		os.Exit(1)
	}
	os.Exit(0)
}

func runRelayChild() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	db, err := heraldsqlite.Open(os.Getenv("HERALD_DEMO_DB"))
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		return err
	}
	// The relay may start while the broker is down (the demo restarts it
	// during the outage): it must wait for the broker, not give up.
	nc, err := nats.Connect(os.Getenv("HERALD_DEMO_NATS"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(100*time.Millisecond), nats.Name("herald-demo-relay"))
	if err != nil {
		return err
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	pub, err := heraldnats.New(nc, &heraldnats.Config{AckTimeout: 2 * time.Second, Logger: log})
	if err != nil {
		return err
	}
	// Short leases so that the demo shows a rescue within seconds of the
	// kill; a production relay keeps the default minute.
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Publisher: pub, Logger: log,
		BatchSize: 200, PollInterval: 5 * time.Millisecond, IdlePollInterval: 50 * time.Millisecond,
		Lease: 3 * time.Second, PublishTimeout: 2 * time.Second, RescueInterval: 250 * time.Millisecond,
		OutageBackoffCap: 250 * time.Millisecond,
		Retry:            herald.RetryPolicy{Base: 50 * time.Millisecond, Cap: time.Second},
	})
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return relay.Stop(stopCtx)
}
