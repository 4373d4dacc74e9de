package heraldclaim_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every consumer and every relay of a claim-checked destination imports
// the package: it must not pull in an object store's SDK (the S3 store is
// in publish/heraldaws, a module of its own).
func TestClaimImportsOnlyHeraldAndTheStandardLibrary(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", ".").Output()
	require.NoError(t, err)
	allowed := map[string]bool{
		"github.com/herald-outbox/herald":             true,
		"github.com/herald-outbox/herald/heraldclaim": true,
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
			"heraldclaim depends on %s; only the standard library and Herald's root package are allowed", p.ImportPath)
	}
	require.Greater(t, checked, 10, "go list returned too few packages to be a real dependency list")
}
