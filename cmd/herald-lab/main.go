// Command herald-lab holds what runs Herald on an embedded default rather
// than in production: `herald-lab demo`, the whole pattern on SQLite and an
// embedded NATS JetStream with faults injected, and `herald-lab bench`, the
// benchmarks. It is a program of its own so that the herald binary that
// teams deploy links no embedded test server.
package main

import (
	"context"
	"os"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/demo"
)

func main() {
	// `herald-lab demo` runs its relay as a child process of this binary.
	demo.RunRelayChildIfAsked()
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
