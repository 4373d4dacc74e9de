package heraldvet_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/herald-outbox/herald/heraldvet"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The cases are the testdata packages: each line that must be reported
// carries a `// want` comment, and every other line must not be. The SDKs
// are stubs under testdata/src at their real import paths.

// One load for the four packages: loading type-checks net/http and
// database/sql from source, the slow part of these tests. The packages
// are dualwrite (a publish in a function that runs a transaction),
// txmismatch (WriteTx on another transaction than the statements),
// ignored (WriteTx errors dropped) and httpposts (net/http POSTs as
// publishes).
func TestAnalyzer(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	analysistest.Run(t, analysistest.TestData(), heraldvet.Analyzer, "dualwrite", "txmismatch", "ignored", "httpposts")
}

// httpignored is httpposts without its want comments.
func TestIgnoreHTTP(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	a := heraldvet.NewAnalyzer(&heraldvet.Config{IgnoreHTTP: true})
	analysistest.Run(t, analysistest.TestData(), a, "httpignored")
}

// Checked with the defaults, httpignored has its two POSTs reported: the
// tests that expect none there are not vacuous.
func TestHTTPIgnoredHasPostsByDefault(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	var unexpected errorCounter
	var diagnostics []string
	for _, r := range analysistest.Run(&unexpected, analysistest.TestData(), heraldvet.Analyzer, "httpignored") {
		for _, d := range r.Diagnostics {
			diagnostics = append(diagnostics, d.Message)
		}
	}
	require.Len(t, diagnostics, 2)
	require.Contains(t, diagnostics[0], "dual write: http.Post publishes")
	require.Contains(t, diagnostics[1], "dual write: http.Client.PostForm publishes")
	require.Equal(t, 2, int(unexpected), "each report is unexpected there")
}

// errorCounter is an analysistest.Testing that counts the errors.
type errorCounter int

func (c *errorCounter) Errorf(string, ...any) { *c++ }

// The flag go vet passes, -http=false, does what IgnoreHTTP does.
func TestHTTPFlag(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	a := heraldvet.NewAnalyzer(nil)
	if err := a.Flags.Set("http", "false"); err != nil {
		t.Fatal(err)
	}
	analysistest.Run(t, analysistest.TestData(), a, "httpignored")
}
