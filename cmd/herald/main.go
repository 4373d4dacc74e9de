// Command herald runs Herald's relay and the tools to operate an outbox:
// migrate, relay, status, dead-letter commands, demo and bench.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/herald-outbox/herald/internal/demo"
)

func main() {
	demo.RunRelayChildIfAsked()

	// The first SIGINT or SIGTERM cancels ctx: the relay drains. A second
	// one aborts at once.
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "herald: second signal: aborting without draining")
		os.Exit(130)
	}()
	os.Exit(run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
