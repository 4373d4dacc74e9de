package heraldvet_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// cmd/heraldvet, built, run by go vet on a module that requires the real
// Herald module: the way users run it, with Herald's own Writer type
// rather than the stub the analysistest cases use.
func TestGoVetVettool(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..")) // the Herald module
	require.NoError(t, err)
	tool := filepath.Join(t.TempDir(), "heraldvet")
	build := exec.Command("go", "build", "-o", tool, "./cmd/heraldvet")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building cmd/heraldvet: %s", out)

	mod := vetModule(t, root)
	wants := readWants(t, filepath.Join(mod, "orders.go"))

	t.Run("ReportsWhatTheCommentsWant", func(t *testing.T) {
		got := goVet(t, mod, tool)
		requireDiagnostics(t, wants, got, false)
	})
	t.Run("PassesItsFlagThrough", func(t *testing.T) {
		got := goVet(t, mod, tool, "-http=false")
		requireDiagnostics(t, wants, got, true)
	})
}

// vetModule copies testdata/vetmod into a module of its own that requires
// Herald from root, and returns its directory.
func vetModule(t *testing.T, root string) string {
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "vetmod", "orders.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "orders.go"), src, 0o644))
	gomod := "module example.com/vetmod\n\ngo 1.26\n\n" +
		"require github.com/herald-outbox/herald v0.0.0\n\n" +
		"replace github.com/herald-outbox/herald => " + strconv.Quote(root) + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	// Herald's go.sum holds every checksum the module can need.
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	return dir
}

// A want is a diagnostic testdata/vetmod/orders.go expects on a line; http
// wants are not expected with -http=false.
type want struct {
	line int
	re   *regexp.Regexp
	http bool
}

var wantComment = regexp.MustCompile("// want `([^`]*)`( http)?$")

func readWants(t *testing.T, file string) []want {
	src, err := os.ReadFile(file)
	require.NoError(t, err)
	var wants []want
	for i, l := range strings.Split(string(src), "\n") {
		if m := wantComment.FindStringSubmatch(l); m != nil {
			wants = append(wants, want{line: i + 1, re: regexp.MustCompile(m[1]), http: m[2] != ""})
		}
	}
	require.Len(t, wants, 3, "the wants of testdata/vetmod/orders.go")
	return wants
}

// A diagnostic is one line of go vet's report: orders.go:12:3: message.
type diagnostic struct {
	line int
	msg  string
}

var diagnosticLine = regexp.MustCompile(`^\S*orders\.go:(\d+):\d+: (.*)$`)

// goVet runs go vet with tool on the module in dir and returns its
// diagnostics. go vet exits 1 when it reports something, 0 when not.
func goVet(t *testing.T, dir, tool string, flags ...string) []diagnostic {
	args := append([]string{"vet", "-vettool=" + tool}, flags...)
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	// -mod=mod lets go add the requirements Herald brings (google/uuid)
	// to the temporary go.mod.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+os.Getenv("GOFLAGS")+" -mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if reported := errors.As(err, &exit) && exit.ExitCode() == 1; err != nil && !reported {
		t.Fatalf("go vet: %v\n%s", err, stderr.String())
	}
	var got []diagnostic
	for _, l := range strings.Split(stderr.String(), "\n") {
		if m := diagnosticLine.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			got = append(got, diagnostic{line: n, msg: m[2]})
		}
	}
	if err != nil {
		require.NotEmpty(t, got, "go vet failed without a diagnostic:\n%s", stderr.String())
	}
	return got
}

// requireDiagnostics checks got against wants: one diagnostic per want,
// on its line and matching it, and nothing else.
func requireDiagnostics(t *testing.T, wants []want, got []diagnostic, noHTTP bool) {
	var expected []want
	for _, w := range wants {
		if w.http && noHTTP {
			continue
		}
		expected = append(expected, w)
	}
	require.Len(t, got, len(expected), "diagnostics: %v", got)
	for i, w := range expected {
		require.Equal(t, w.line, got[i].line, "diagnostic %d: %s", i, got[i].msg)
		require.Regexp(t, w.re, got[i].msg)
	}
}
