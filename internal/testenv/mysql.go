package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"
)

// EnvMySQL names the environment variable with the test MySQL or MariaDB
// server's go-sql-driver DSN, user:password@tcp(host:port)/dbname; by
// default root@tcp(127.0.0.1:3306)/test, as .ci/run sets the machine's
// MariaDB up.
const EnvMySQL = "HERALD_TEST_MYSQL"

var mysqlReach struct {
	once sync.Once
	err  error
}

// MySQL returns the test server's go-sql-driver DSN, after checking once
// that it answers; when it does not, the test skips (fails with CI=true).
func MySQL(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvMySQL)
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test"
	}
	mysqlReach.once.Do(func() {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			mysqlReach.err = err
			return
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		mysqlReach.err = db.PingContext(ctx)
	})
	if mysqlReach.err != nil {
		Unavailable(t, fmt.Sprintf("no MySQL or MariaDB for tests (%v): start MariaDB 10.6+ or MySQL 8 "+
			"(.ci/run starts the machine's) or set %s=user:password@tcp(host:3306)/dbname", mysqlReach.err, EnvMySQL))
	}
	return dsn
}

// MySQLDatabase creates a database of the test's own on db, dropped when t
// ends: the MySQL counterpart of a PostgreSQL schema.
func MySQLDatabase(t testing.TB, db *sql.DB) string {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read panics instead
	name := "ht_" + hex.EncodeToString(b[:])
	_, err := db.ExecContext(t.Context(), "CREATE DATABASE `"+name+"`")
	require.NoError(t, err)
	t.Cleanup(func() {
		// Its own context: the test's has ended by now. The timeout also
		// bounds a DROP stuck behind a lock that a test leaked.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := db.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testenv: dropping database %s: %v", name, err)
		}
	})
	return name
}

// MySQLURL returns a mysql://user:password@host:port/database URL, as the
// herald command takes, for database on the test server.
func MySQLURL(t testing.TB, database string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(MySQL(t))
	require.NoError(t, err)
	u := "mysql://" + cfg.User
	if cfg.Passwd != "" {
		u += ":" + cfg.Passwd
	}
	return u + "@" + cfg.Addr + "/" + database
}
