package heraldtest_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Users import the kit into their own tests: it must not pull in a
// database driver, a test server or a test framework they may not use.
// The drivers' readers satisfy its interfaces without it importing them.
func TestKitImportsOnlyHeraldAndTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", ".").Output()
	require.NoError(t, err)

	allowed := map[string]bool{
		"github.com/herald-outbox/herald":            true,
		"github.com/herald-outbox/herald/heraldtest": true,
		// The operator types (EventRow) the drivers' readers return; the
		// package itself imports only the root and the standard library.
		"github.com/herald-outbox/herald/heraldadmin": true,
		"github.com/google/uuid":                      true, // through herald
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	checked := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		require.NoError(t, dec.Decode(&p))
		checked++
		require.Truef(t, p.Standard || allowed[p.ImportPath],
			"heraldtest depends on %s; only the standard library, Herald's root package and heraldadmin are allowed", p.ImportPath)
	}
	require.Greater(t, checked, 10, "go list returned too few packages to be a real dependency list")
}
