package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/herald-outbox/herald/internal/demo"
)

func cmdDemo(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	f := newFlags("demo", getenv, stderr)
	var cfg demo.Config
	f.IntVar(&cfg.Orders, "orders", 3000, "orders the service tries to place")
	f.IntVar(&cfg.Rate, "rate", 150, "orders per second")
	f.IntVar(&cfg.RollbackPercent, "rollback-percent", 10, "share of order transactions rolled back on purpose")
	f.DurationVar(&cfg.Outage, "outage", 3*time.Second, "how long the broker is down midway")
	quiet := f.Bool("quiet", false, "no live progress line")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return usagef("demo takes no arguments")
	}
	if cfg.Orders < 10 || cfg.Rate < 1 || cfg.RollbackPercent < 0 || cfg.RollbackPercent > 90 || cfg.Outage < 0 {
		return usagef("demo: --orders at least 10, --rate positive, --rollback-percent 0 to 90, --outage not negative")
	}
	if !*quiet {
		cfg.Progress = stdout
	}
	cfg.Log = stdout
	fmt.Fprintf(stdout, "Herald demo: %d orders at %d/s on SQLite, relayed to an embedded NATS JetStream.\n"+
		"About %d%% of the order transactions roll back on purpose; the broker goes down for %s at one third,\n"+
		"and the relay is killed (SIGKILL) and restarted at two thirds.\n\n",
		cfg.Orders, cfg.Rate, cfg.RollbackPercent, cfg.Outage)
	r, err := demo.Run(ctx, cfg)
	if err != nil {
		return err
	}
	r.Print(stdout)
	if !r.OK() {
		return fmt.Errorf("an invariant failed: %d lost, %d ghosts, %d of %d committed events received",
			r.Lost, r.Ghosts, r.Received, r.Committed)
	}
	fmt.Fprintln(stdout, "\nEvery committed order's event arrived; no rolled-back order's event did.")
	return nil
}
