//go:build linux || darwin

package testenv_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The primary's commits are on the replica, which refuses writes until
// promoted; promoted, with the primary stopped, it takes them.
func TestMariaDBPairFailsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := testenv.StartMariaDBPair(t)
	open := func(dsn string) *sql.DB {
		db, err := sql.Open("mysql", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { _ = db.Close() })
		return db
	}
	primary, replica := open(pair.Primary.DSN), open(pair.Replica.DSN)
	readOnly := func(db *sql.DB) bool {
		var ro bool
		require.NoError(t, db.QueryRowContext(ctx, `SELECT @@global.read_only`).Scan(&ro))
		return ro
	}
	require.False(t, readOnly(primary))
	require.True(t, readOnly(replica))

	_, err := primary.ExecContext(ctx, `CREATE TABLE t (v INT PRIMARY KEY)`)
	require.NoError(t, err)
	_, err = primary.ExecContext(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	// The commit waited for the replica's receipt; applying it may trail.
	require.Eventually(t, func() bool {
		var n int
		return replica.QueryRowContext(ctx, `SELECT count(*) FROM t`).Scan(&n) == nil && n == 1
	}, 10*time.Second, 10*time.Millisecond)
	var acks int
	require.NoError(t, primary.QueryRowContext(ctx, `SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS
		WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_YES_TX'`).Scan(&acks))
	require.GreaterOrEqual(t, acks, 3, "the commits were acknowledged by the replica")

	pair.Promote(t)
	pair.StopPrimary(t)
	require.False(t, readOnly(replica))
	_, err = replica.ExecContext(ctx, `INSERT INTO t VALUES (2)`)
	require.NoError(t, err)
	require.Error(t, primary.PingContext(ctx), "the primary is stopped")
}
