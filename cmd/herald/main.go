// Command herald runs Herald's relay and the tools to operate an outbox:
// migrate, relay, status and the dead-letter commands. The demo and the
// benchmarks are in cmd/herald-lab, so that this binary links no embedded
// test server.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
