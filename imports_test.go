package herald_test

import (
	"encoding/json"
	"os/exec"
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
