package heraldtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main runs a package's tests, stops the throwaway PostgreSQL cluster if
// one was started, then fails the run if any goroutine leaked. Call it from
// TestMain: func TestMain(m *testing.M) { heraldtest.Main(m) }.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	StopPostgres()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
