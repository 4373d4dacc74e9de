package heraldmysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
)

// A switchover: the primary turns read-only without dropping its
// clients, then the replica is promoted. A pool on the DSN of both with
// target_session_attrs=read-write leaves the old primary on its own,
// though its idle connection to it still works; while no server takes
// writes, a connection is refused as a failover under way, naming each
// server.
func TestReadWritePoolLeavesAServerThatTurnedReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := testenv.StartMariaDBPair(t)
	db := failoverPool(t, pair.URL+"&timeout=2s")
	server := func() string {
		var addr string
		require.NoError(t, db.QueryRowContext(ctx, `SELECT CONCAT('127.0.0.1:', @@port)`).Scan(&addr))
		return addr
	}
	require.Equal(t, pair.Primary.Addr, server())
	// Without target_session_attrs, the first server that answers.
	anyDB := failoverPool(t, "mysql://root@"+pair.Replica.Addr+","+pair.Primary.Addr+"/"+testenv.MariaDBDatabase)
	var port string
	require.NoError(t, anyDB.QueryRowContext(ctx, `SELECT CONCAT('127.0.0.1:', @@port)`).Scan(&port))
	require.Equal(t, pair.Replica.Addr, port)

	primary, err := sql.Open("mysql", pair.Primary.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Close() })
	_, err = primary.ExecContext(ctx, `SET GLOBAL read_only = ON`)
	require.NoError(t, err)
	// root ignores read_only: no error on a write would tell the pool.
	_, err = primary.ExecContext(ctx, `CREATE TABLE written_while_read_only (id INT PRIMARY KEY)`)
	require.NoError(t, err, "root writes on a read-only server")

	_, _, err = heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: pair.URL})
	var oe *heraldspec.DatabaseOpenError
	require.ErrorAs(t, err, &oe)
	require.True(t, oe.Unreachable, "%v", err)
	require.ErrorContains(t, err, "no server of "+pair.Primary.Addr+","+pair.Replica.Addr+" takes writes: "+
		pair.Primary.Addr+": read-only (@@global.read_only = 1); "+pair.Replica.Addr+": read-only")

	pair.Promote(t)
	require.Eventually(t, func() bool { return server() == pair.Replica.Addr }, 10*time.Second, 10*time.Millisecond,
		"the pool stays on the old primary")
	_, err = db.ExecContext(ctx, `CREATE TABLE after_switchover (id INT PRIMARY KEY)`)
	require.NoError(t, err)
}
