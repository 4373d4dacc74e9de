package heraldce_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// heraldce is imported by several publishers: it must pull in no broker
// SDK, only what the root package itself uses.
func TestImportsOnlyTheRootAndTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.ElementsMatch(t, []string{
		"github.com/google/uuid",
		"github.com/herald-outbox/herald",
		"github.com/herald-outbox/herald/heraldce",
	}, deps)
}
