package heraldvet_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/herald-outbox/herald/heraldvet"
)

// The cases are the testdata packages: each line that must be reported
// carries a `// want` comment, and every other line must not be. The SDKs
// are stubs under testdata/src at their real import paths.

func TestDualWrite(t *testing.T) {
	t.Parallel()
	analysistest.Run(t, analysistest.TestData(), heraldvet.Analyzer, "dualwrite")
}
