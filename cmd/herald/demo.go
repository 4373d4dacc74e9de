package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/herald-outbox/herald/cmd/herald/internal/demo"
)

func setupDemo(f *flagSet) func(context.Context, *invocation) error {
	var cfg demo.Config
	orders := f.LocalInt("orders", 3000, "the service tries to place `N` orders (at least 10)")
	rate := f.LocalInt("rate", 150, "place `N` orders per second")
	rollback := f.LocalInt("rollback-percent", 10, "roll back this `percent` of the order transactions on purpose (0 to 90)")
	outage := f.LocalDuration("outage", 3*time.Second, "stop the broker midway for this `duration`")
	duration := f.LocalDuration("duration", 0, "place orders for this `duration` at --rate (sets --orders; 0: use --orders)")
	quiet := f.LocalBool("quiet", "no live progress line")
	return func(ctx context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		cfg.Orders, cfg.Rate, cfg.RollbackPercent, cfg.Outage = *orders, *rate, *rollback, *outage
		switch {
		case *duration < 0:
			return usagef("demo: --duration must not be negative")
		case *duration > 0:
			cfg.Orders = int(duration.Seconds() * float64(*rate))
		}
		if cfg.Orders < 10 || cfg.Rate < 1 || cfg.RollbackPercent < 0 || cfg.RollbackPercent > 90 || cfg.Outage < 0 {
			return usagef("demo: --orders at least 10 (or --duration × --rate), --rate positive, --rollback-percent 0 to 90, --outage not negative")
		}
		stdout := inv.stdout
		if !*quiet {
			cfg.Progress = stdout
			cfg.PlainProgress = !isTerminal(stdout)
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
}

// isTerminal reports whether w is a terminal (a character device), where a
// status line may be rewritten in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
