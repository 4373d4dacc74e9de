//go:build !linux && !darwin

package testenv

import (
	"runtime"
	"testing"
)

// EnvMoto names the environment variable holding the path of moto_server,
// when it is not in PATH.
const EnvMoto = "HERALD_TEST_MOTO"

// MotoServer is a moto_server process; see the Linux and macOS build.
type MotoServer struct {
	URL string
}

// Moto skips the test, or fails it with CI=true: the helper starts
// moto_server on Linux and macOS only.
func Moto(t testing.TB, _ ...string) *MotoServer {
	t.Helper()
	Unavailable(t, "testenv: no moto_server helper on "+runtime.GOOS)
	return nil
}
