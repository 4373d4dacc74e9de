//go:build !linux && !darwin

package heraldtest

import (
	"runtime"
	"testing"
)

// PubSubEmulator skips the test, or fails it with CI=true: the helper
// starts the emulator on Linux and macOS only.
func PubSubEmulator(t testing.TB) string {
	t.Helper()
	Unavailable(t, "heraldtest: no Pub/Sub emulator helper on "+runtime.GOOS)
	return ""
}
