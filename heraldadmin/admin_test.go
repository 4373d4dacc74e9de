package heraldadmin_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
)

func TestParkedErrorNamesTheKeyAndHowToGoOn(t *testing.T) {
	t.Parallel()
	one := heraldadmin.BlockedKey{Topic: "orders", Key: "k1", EventID: "0190f0a8-0000-7000-8000-000000000001", Waiting: 3}
	for _, tc := range []struct {
		name string
		keys []heraldadmin.BlockedKey
		want []string
	}{
		{"OneKey", []heraldadmin.BlockedKey{one}, []string{one.EventID, `key "k1"`, `topic "orders"`, "3 events waiting", "resume"}},
		{"SeveralKeys", []heraldadmin.BlockedKey{one, one, one}, []string{one.EventID, "(and 2 more keys)", "resume"}},
		{"NoKeysStillSaysWhatToDo", nil, []string{"resume"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("discarding: %w", &heraldadmin.ParkedError{Keys: tc.keys})
			var pe *heraldadmin.ParkedError
			require.True(t, errors.As(err, &pe))
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

// Operator tools import this package; it must bring in no more than the
// root package does: no driver, no broker SDK.
func TestImportsOnlyTheRootPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard", ".").Output()
	require.NoError(t, err)
	allowed := map[string]bool{
		"github.com/herald-outbox/herald":             true,
		"github.com/herald-outbox/herald/heraldadmin": true,
		"github.com/google/uuid":                      true,
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var checked int
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		require.NoError(t, dec.Decode(&p))
		checked++
		require.Truef(t, p.Standard || allowed[p.ImportPath], "heraldadmin depends on %s", p.ImportPath)
	}
	require.Greater(t, checked, 10, "go list returned too few packages to be a real dependency list")
}
