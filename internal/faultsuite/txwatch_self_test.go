package faultsuite_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The watch fails a transaction its client holds idle for longTx, or one
// waiting longTx on a lock, but not one whose statement the server is
// still executing after a second (a starved machine's COMMIT): those only
// at starvedTx.
func TestTxWatchTellsAHeldTransactionFromABusyServer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dsn := testenv.PostgresDSN(t)
	watcher, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(watcher.Close)
	session := func(name string) *pgx.Conn {
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		cfg.RuntimeParams["application_name"] = name
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	seen := func(w *txWatch, app string) bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, d := range w.seen {
			if strings.HasPrefix(d, app+" ") {
				return true
			}
		}
		return false
	}
	prefix := "fault-txwatch-" + testenv.Schema(t)
	w := watchRelayTx(t, watcher, prefix)

	// Busy: one statement the server executes for longer than longTx.
	busy := session(prefix + "-busy")
	tx, err := busy.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_sleep($1)`, (longTx + longTx/2).Seconds())
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	require.False(t, seen(w, prefix+"-busy"), "a statement the server was executing counted as held")

	// Held: the client leaves its transaction idle until the watch sees it.
	held := session(prefix + "-held")
	tx, err = held.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return seen(w, prefix+"-held") }, 30*time.Second, 10*time.Millisecond,
		"a transaction held idle was not seen")
	require.NoError(t, tx.Rollback(ctx))
	w.stop()
}
