// Package testenv provides the real PostgreSQL and NATS JetStream servers
// that Herald's tests run against.
//
// PostgreSQL comes from HERALD_TEST_POSTGRES when it is set. Otherwise the
// first call to [PostgresDSN] starts one throwaway cluster from the local
// initdb and postgres binaries, shared by every test of the test binary.
// Tests isolate themselves with [Schema] rather than with databases, because
// a schema costs one statement and needs no second connection string.
//
// The throwaway cluster dies with the test binary (on Linux the kernel
// kills it). Its temporary directory is removed by [StopPostgres], which a
// TestMain should call after m.Run; directories left behind by a test binary
// that exited without it are swept by the next one that starts a cluster.
//
// Without HERALD_TEST_POSTGRES or local binaries, PostgreSQL tests skip,
// except when CI=true, where they fail: a CI run that silently skipped its
// database tests would prove nothing.
package testenv
