package testenv

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main runs a package's tests, stops the throwaway PostgreSQL cluster if
// one was started, then fails the run if any goroutine leaked. Call it from
// TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
//
// OpenCensus's worker is never counted: the Google Cloud client libraries
// import OpenCensus, whose package init starts that goroutine for the life
// of the process, so every binary that links heraldpubsub (the herald
// command among them) has it before any test runs.
func Main(m *testing.M, opts ...goleak.Option) {
	opts = append(opts, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
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
