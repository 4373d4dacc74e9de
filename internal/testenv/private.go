package testenv

import (
	"os"
	"testing"
)

// Cluster is a throwaway PostgreSQL cluster of one test's own, which the
// test may stop and start again: what a database restart does to its
// clients. It is never the shared server of HERALD_TEST_POSTGRES.
type Cluster struct {
	c *cluster
	// DSN connects as the superuser to database postgres; it stays valid
	// across restarts (same port).
	DSN string
}

// PrivateCluster starts a cluster for t and removes it when t ends. Without
// the PostgreSQL server binaries it skips t, or fails it when CI=true.
func PrivateCluster(t testing.TB) *Cluster {
	t.Helper()
	return privateCluster(t)
}

// privateCluster is PrivateCluster with postgres arguments of the
// caller's (settings over the defaults: "-c", "name=value").
func privateCluster(t testing.TB, settings ...string) *Cluster {
	t.Helper()
	c, dsn, err := startCluster(settings...)
	switch {
	case err != nil && os.Getenv("CI") == "true":
		t.Fatalf("testenv: a private PostgreSQL cluster is required in CI (install initdb and postgres): %v", err)
	case err != nil:
		t.Skipf("testenv: cannot start a private PostgreSQL cluster (%v); install the PostgreSQL server binaries", err)
	}
	t.Cleanup(c.stop)
	return &Cluster{c: c, DSN: dsn}
}

// Stop shuts the server down, cutting every connection, and waits for it.
func (pc *Cluster) Stop(t testing.TB) {
	t.Helper()
	pc.c.halt()
}

// Start starts the stopped server again on the same port and data, and
// waits until it accepts connections.
func (pc *Cluster) Start(t testing.TB) {
	t.Helper()
	c := pc.c
	if _, err := c.run(c.postgres, c.data, c.port, c.cred); err != nil {
		t.Fatalf("testenv: restarting the private cluster: %v", err)
	}
}
