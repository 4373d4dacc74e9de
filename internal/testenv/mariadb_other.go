//go:build !linux && !darwin

package testenv

import (
	"runtime"
	"testing"
)

// MariaDBDatabase is the database a MariaDBPair creates on its primary.
const MariaDBDatabase = "test"

// MariaDBServer is one server of a MariaDBPair; see the Linux and macOS
// build.
type MariaDBServer struct {
	DSN, Addr string
}

// MariaDBPair is a MariaDB primary and its replica; see the Linux and
// macOS build.
type MariaDBPair struct {
	Primary, Replica *MariaDBServer
	URL              string
}

// StartMariaDBPair skips the test, or fails it with CI=true: the helper
// starts MariaDB on Linux and macOS only.
func StartMariaDBPair(t testing.TB) *MariaDBPair {
	t.Helper()
	Unavailable(t, "testenv: no MariaDB pair helper on "+runtime.GOOS)
	return nil
}

// Promote does nothing: there is no pair to promote.
func (*MariaDBPair) Promote(testing.TB) {}

// StopPrimary does nothing: there is no pair to stop.
func (*MariaDBPair) StopPrimary(testing.TB) {}
