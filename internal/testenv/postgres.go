package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvPostgres names the environment variable holding the DSN of an existing
// PostgreSQL server; when set, no throwaway cluster is started.
const EnvPostgres = "HERALD_TEST_POSTGRES"

var shared struct {
	once    sync.Once
	mu      sync.Mutex
	cluster *cluster
	dsn     string
	err     error
	stopped bool
}

// PostgresDSN returns the DSN of a PostgreSQL server for tests: the value of
// HERALD_TEST_POSTGRES, or else that of a throwaway cluster started on first
// use and shared by the whole test binary. The DSN connects as a superuser.
//
// When neither is available the test is skipped, or failed if CI=true.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	if dsn := os.Getenv(EnvPostgres); dsn != "" {
		return dsn
	}
	shared.once.Do(func() {
		c, dsn, err := startCluster()
		shared.mu.Lock()
		shared.cluster, shared.dsn, shared.err = c, dsn, err
		shared.mu.Unlock()
	})
	shared.mu.Lock()
	dsn, err, stopped := shared.dsn, shared.err, shared.stopped
	shared.mu.Unlock()
	switch {
	case stopped:
		t.Fatal("testenv: PostgresDSN called after StopPostgres")
	case err != nil && os.Getenv("CI") == "true":
		t.Fatalf("PostgreSQL is required in CI: set %s or install initdb (%v)", EnvPostgres, err)
	case err != nil:
		t.Skipf("testenv: no PostgreSQL for tests (%v); set %s=postgres://user@host:port/db "+
			"or install the PostgreSQL server binaries (initdb, postgres)", err, EnvPostgres)
	}
	return dsn
}

// StopPostgres stops the throwaway cluster, if one was started, and removes
// its directory. Call it from TestMain after m.Run; PostgresDSN fails the
// test when called afterwards. It is safe to call more than once.
func StopPostgres() {
	shared.mu.Lock()
	c := shared.cluster
	shared.cluster, shared.stopped = nil, true
	shared.mu.Unlock()
	if c != nil {
		c.stop()
	}
}

// PostgresPool returns a pool on [PostgresDSN], closed when the test ends.
func PostgresPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatalf("testenv: opening pool: %v", err)
	}
	t.Cleanup(pool.Close)
	// pgxpool connects lazily; pinging here turns a bad DSN into one clear
	// failure instead of an error in whatever the test does first.
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("testenv: pinging PostgreSQL: %v", err)
	}
	return pool
}

// Schema creates a schema with a fresh name matching ^[a-z_][a-z0-9_]*$ in
// the database of [PostgresDSN], drops it with everything in it when the
// test ends, and returns its name. Being lowercase, the name needs no
// quoting in SQL.
func Schema(t testing.TB) string {
	t.Helper()
	dsn := PostgresDSN(t)
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read panics instead
	name := "ht_" + hex.EncodeToString(b[:])

	if err := execOnce(dsn, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("testenv: creating schema: %v", err)
	}
	t.Cleanup(func() {
		if err := execOnce(dsn, "DROP SCHEMA IF EXISTS "+name+" CASCADE"); err != nil {
			t.Errorf("testenv: dropping schema %s: %v", name, err)
		}
	})
	return name
}

// execOnce runs sql on its own connection so that Schema works without a
// pool and its cleanup does not depend on a pool the test may have closed.
func execOnce(dsn, sql string) error {
	// The timeout also bounds a DROP stuck behind a lock that a test leaked.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}
