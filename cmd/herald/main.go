// Command herald runs Herald's relay and the tools to operate an outbox:
// migrate, relay, status, the dead-letter commands, demo and bench.
package main

import (
	"context"
	"os"

	"github.com/herald-outbox/herald/cmd/herald/internal/demo"
)

func main() {
	// `herald demo` runs its relay as a child process of this binary.
	demo.RunRelayChildIfAsked()
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
