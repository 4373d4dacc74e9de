package herald_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The root package is the API users import: it must never pull in a
// database driver or a broker SDK, directly or through a dependency.
func TestRootImportsNoDriverOrBrokerSDK(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", ".").Output()
	require.NoError(t, err)

	allowed := []string{"github.com/herald-outbox/herald", "github.com/google/uuid"}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var checked int
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		require.NoError(t, dec.Decode(&p))
		checked++
		if p.Standard {
			continue
		}
		ok := false
		for _, a := range allowed {
			if p.ImportPath == a {
				ok = true
			}
		}
		require.Truef(t, ok, "root package depends on %s; only the standard library and %v are allowed", p.ImportPath, allowed)
	}
	require.Greater(t, checked, 10, "go list returned too few packages to be a real dependency list")
}

// A service that imports the core, the PostgreSQL driver and the NATS
// publisher carries none of the heavy or optional modules in its module
// graph: the AWS SDK, Google Cloud, chromedp (the admin page's browser
// test) and x/tools (heraldvet) are requirements of modules of their own
// (go.work lists them). The service is a module of the test's own, built
// outside the workspace as a user's would be.
func TestAServiceOfTheCoreCarriesNoHeavyModule(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(".")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name, text string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
	}
	write("go.mod", "module example.com/orders\n\ngo 1.26.0\n\n"+
		"require github.com/herald-outbox/herald v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/herald-outbox/herald => "+root+"\n")
	write("main.go", `package main

import (
	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

var (
	_ herald.Publisher = (*heraldnats.Publisher)(nil)
	_ herald.Store     = (*heraldpg.Driver)(nil)
)

func main() {}
`)
	goCmd := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Outside the workspace, as a user's module is built.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	goCmd("mod", "tidy")
	goCmd("build", "./...")
	modules := goCmd("list", "-m", "all")
	require.Contains(t, modules, "github.com/nats-io/nats.go", "the list is the service's module graph")
	for _, heavy := range []string{"github.com/aws/aws-sdk-go-v2", "cloud.google.com/", "github.com/chromedp/"} {
		require.NotContains(t, modules, heavy, "a service of herald, heraldpg and heraldnats carries %s", heavy)
	}
	// golang.org/x/text, which pgx needs, requires x/tools in its own
	// go.mod (for its generators), so x/tools is listed in every pgx
	// user's graph. What Herald controls: no package of the service needs
	// it, and nothing but x/text requires it.
	require.Contains(t, goCmd("mod", "why", "-m", "golang.org/x/tools"), "(main module does not need module golang.org/x/tools)")
	for _, edge := range strings.Split(strings.TrimSpace(goCmd("mod", "graph")), "\n") {
		from, to, _ := strings.Cut(edge, " ")
		if strings.HasPrefix(to, "golang.org/x/tools@") {
			require.True(t, strings.HasPrefix(from, "golang.org/x/text@"), "%s requires x/tools", from)
		}
	}
}
