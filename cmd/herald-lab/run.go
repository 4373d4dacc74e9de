package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/bench"
	"github.com/herald-outbox/herald/internal/buildinfo"
)

// Exit codes, as herald's.
const (
	exitOK     = 0
	exitFailed = 1 // the command ran and failed
	exitUsage  = 2 // bad command, flag or argument
)

const usage = `herald-lab runs Herald on this machine to show and measure it; the
herald command is the one to deploy.

Usage:
  herald-lab demo [flags]                               the whole pattern on SQLite and an embedded NATS, faults included (see herald-lab demo -h)
  herald-lab bench [producers|drain|latency|all] [flags] benchmarks against PostgreSQL (see herald-lab bench -h)
  herald-lab version                                    Herald's version, the Go version and the platform
  herald-lab help                                       this help
`

// run is the whole program; the first SIGINT or SIGTERM cancels the
// command's context.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.Read())
		return exitOK
	case "demo":
		return runDemo(ctx, rest, stdout, stderr)
	case "bench":
		return bench.Main(ctx, rest, stdout, stderr)
	}
	fmt.Fprintf(stderr, "herald-lab: unknown command %q (use demo or bench; the relay and the operator commands are herald's)\n", name)
	return exitUsage
}
