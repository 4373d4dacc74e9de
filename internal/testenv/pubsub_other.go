//go:build !linux && !darwin

package testenv

import (
	"runtime"
	"testing"
)

// PubSubEmulator skips the test, or fails it with CI=true: the helper
// starts the emulator on Linux and macOS only.
func PubSubEmulator(t testing.TB) string {
	t.Helper()
	Unavailable(t, "testenv: no Pub/Sub emulator helper on "+runtime.GOOS)
	return ""
}
