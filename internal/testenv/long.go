package testenv

import "testing"

// Long marks a test that takes seconds: many events through real relays,
// processes killed and restarted, plans read over large tables, a build.
// Under -short (the inner loop, `go test -short ./...`) it is skipped,
// with a message saying so; the full suite (`go test -race ./...`, what CI
// runs) runs it. Services are not the reason: a short run still talks to
// the real PostgreSQL, MariaDB and brokers.
func Long(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("long: left out under -short; the full suite runs it")
	}
}
