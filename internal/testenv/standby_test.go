//go:build linux || darwin

package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The pair's DSN reaches the primary, whose commits the standby has;
// after a promotion and the primary's crash it reaches the standby, which
// takes writes.
func TestStandbyPairFailsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := testenv.StandbyPair(t)
	exec := func(dsn, sql string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close(ctx) }()
		_, err = conn.Exec(ctx, sql)
		return err
	}
	port := func(dsn string) string {
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer func() { _ = conn.Close(ctx) }()
		var p string
		require.NoError(t, conn.QueryRow(ctx, `SHOW port`).Scan(&p))
		return p
	}
	primaryPort, standbyPort := port(pair.Primary.DSN), port(pair.Standby.DSN)
	require.Equal(t, primaryPort, port(pair.DSN))

	require.NoError(t, exec(pair.DSN, `CREATE TABLE t (v int); INSERT INTO t VALUES (1)`))
	// The commit waited for the standby's flush; replay may trail it.
	require.Eventually(t, func() bool { return exec(pair.Standby.DSN, `SELECT 1/count(*) FROM t`) == nil },
		10*time.Second, 10*time.Millisecond)
	require.Error(t, exec(pair.Standby.DSN, `INSERT INTO t VALUES (2)`), "a standby is read-only")

	pair.Standby.Promote(t)
	pair.Primary.Crash(t)
	require.Equal(t, standbyPort, port(pair.DSN))
	require.NoError(t, exec(pair.DSN, `INSERT INTO t VALUES (2)`))
}
