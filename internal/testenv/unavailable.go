package testenv

import (
	"os"
	"testing"
)

// Unavailable skips the test because a service or tool it needs is
// missing, saying why and how to get it; with CI=true it fails instead,
// since a silently skipped test proves nothing.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (CI=true: every service and tool must be there)", why)
	}
	t.Skip(why)
}
