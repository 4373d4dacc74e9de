package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/demo"
)

const demoUsage = `Usage: herald-lab demo [flags]

The whole outbox pattern on an embedded SQLite and NATS JetStream, faults
included: orders placed (some rolled back on purpose), the broker stopped
midway, the relay killed and restarted; then the invariants.

Flags:
`

// oneDash finds a flag named with one dash in the flag package's errors.
var oneDash = regexp.MustCompile(`( )-(\w)`)

// demoFlags are the demo's flags, parsed from args.
type demoFlags struct {
	cfg      demo.Config
	duration time.Duration
	quiet    bool
}

func parseDemo(args []string, stdout io.Writer) (*demoFlags, error) {
	var d demoFlags
	fs := flag.NewFlagSet("herald-lab demo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.IntVar(&d.cfg.Orders, "orders", 3000, "the service tries to place `N` orders (at least 10)")
	fs.IntVar(&d.cfg.Rate, "rate", 150, "place `N` orders per second")
	fs.IntVar(&d.cfg.RollbackPercent, "rollback-percent", 10, "roll back this `percent` of the order transactions on purpose (0 to 90)")
	fs.DurationVar(&d.cfg.Outage, "outage", 3*time.Second, "stop the broker midway for this `duration`")
	fs.DurationVar(&d.duration, "duration", 0, "place orders for this `duration` at --rate (sets --orders; 0: use --orders)")
	fs.BoolVar(&d.quiet, "quiet", false, "no live progress line")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, demoUsage)
		fs.VisitAll(func(f *flag.Flag) {
			name, text := flag.UnquoteUsage(f)
			if f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "0s" {
				text += " (default " + f.DefValue + ")"
			}
			fmt.Fprintf(stdout, "  %s\n        %s\n", strings.TrimSpace("--"+f.Name+" "+name), text)
		})
		return nil, err
	}
	if err != nil {
		// The flag package names flags with one dash; herald's commands
		// are written with two.
		return nil, errors.New(oneDash.ReplaceAllString(err.Error(), "$1--$2") + " (see herald-lab demo -h)")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("takes no arguments, got %q", fs.Arg(0))
	}
	switch {
	case d.duration < 0:
		return nil, errors.New("--duration must not be negative")
	case d.duration > 0:
		d.cfg.Orders = int(d.duration.Seconds() * float64(d.cfg.Rate))
	}
	c := d.cfg
	if c.Orders < 10 || c.Rate < 1 || c.RollbackPercent < 0 || c.RollbackPercent > 90 || c.Outage < 0 {
		return nil, errors.New("--orders at least 10 (or --duration × --rate), --rate positive, --rollback-percent 0 to 90, --outage not negative")
	}
	return &d, nil
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	d, err := parseDemo(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "herald-lab demo: "+err.Error())
		return exitUsage
	}
	cfg := d.cfg
	if !d.quiet {
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
		fmt.Fprintln(stderr, "herald-lab demo: "+err.Error())
		return exitFailed
	}
	r.Print(stdout)
	if !r.OK() {
		fmt.Fprintf(stderr, "herald-lab demo: an invariant failed: %d lost, %d ghosts, %d of %d committed events received\n",
			r.Lost, r.Ghosts, r.Received, r.Committed)
		return exitFailed
	}
	fmt.Fprintln(stdout, "\nEvery committed order's event arrived; no rolled-back order's event did.")
	return exitOK
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
