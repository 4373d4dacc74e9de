package faultsuite_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// longTx is how long a relay transaction may stay open: the design asks
// for well under a second, so a second is already a failure.
const longTx = time.Second

// starvedTx is how long a relay transaction may stay open while the server
// is still executing its statements. On a 2-core machine kept busy by
// other processes, a relay's COMMIT was seen active for 1.1s: the server
// starved of CPU, not a transaction the relay held. Holding is what
// longTx bounds: a transaction idle for longTx waiting for its relay, or
// waiting longTx for a lock.
const starvedTx = 3 * longTx

// txWatch polls pg_stat_activity while a case runs and records every
// transaction of a relay's sessions held open for longTx or more (idle in
// the transaction, or waiting on a lock), or open at all for starvedTx or
// more: a claim or an acknowledgement that holds row or key locks that
// long stalls every other relay behind it.
type txWatch struct {
	stop func()

	mu   sync.Mutex
	seen map[string]string // session and transaction start -> description
}

// watchRelayTx watches the sessions whose application_name starts with
// prefix, through pool (the test's own, never through a proxy), until the
// test ends or check is called.
func watchRelayTx(t *testing.T, pool *pgxpool.Pool, prefix string) *txWatch {
	t.Helper()
	return watchRelayTxSince(t, pool, prefix, "-infinity")
}

// watchRelayTxSince is watchRelayTx for the transactions that started at
// since (a timestamp of the database's clock) or later.
func watchRelayTxSince(t *testing.T, pool *pgxpool.Pool, prefix, since string) *txWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &txWatch{seen: map[string]string{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			w.poll(ctx, pool, prefix, since)
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	w.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(w.stop)
	return w
}

// poll records the long transactions of the moment. A session whose state
// is idle is left out whatever its xact_start: it waits for its client
// outside any transaction. (Under heavy load PostgreSQL 15 was seen to
// show such a session, with no wait event, keeping the xact_start of its
// last statement for seconds.)
func (w *txWatch) poll(ctx context.Context, pool *pgxpool.Pool, prefix, since string) {
	rows, err := pool.Query(ctx, `SELECT pid, application_name, xact_start::text, state,
			extract(epoch FROM clock_timestamp() - xact_start)::float8, left(regexp_replace(query, '\s+', ' ', 'g'), 120)
		FROM pg_stat_activity
		WHERE starts_with(application_name, $1) AND state <> 'idle' AND xact_start >= $4::timestamptz
		  AND (xact_start < clock_timestamp() - $3 * interval '1 microsecond'
		    OR (xact_start < clock_timestamp() - $2 * interval '1 microsecond'
		      AND (state LIKE 'idle in transaction%' AND state_change < clock_timestamp() - $2 * interval '1 microsecond'
		        OR wait_event_type = 'Lock')))`,
		prefix, longTx.Microseconds(), starvedTx.Microseconds(), since)
	if err != nil {
		return // the database restarts in one case; the next poll sees it again
	}
	defer rows.Close()
	for rows.Next() {
		var (
			pid               int
			app, start, state string
			age               float64
			query             string
		)
		if rows.Scan(&pid, &app, &start, &state, &age, &query) != nil {
			return
		}
		w.mu.Lock()
		w.seen[fmt.Sprint(pid, start)] = fmt.Sprintf("%s (pid %d): transaction open %.1fs, %s, last statement: %s",
			app, pid, age, state, query)
		w.mu.Unlock()
	}
}

// check stops the watch and fails the test if a relay transaction was
// held open for longTx or more, or open for starvedTx.
func (w *txWatch) check(t *testing.T) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	var long []string
	for _, d := range w.seen {
		long = append(long, d)
	}
	require.Emptyf(t, long, "relay transactions held open (idle or waiting on a lock) for %s or more, or open for %s:\n%v",
		longTx, starvedTx, long)
}

// dbNow is the database's clock, for watchRelayTxSince.
func dbNow(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var now string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT clock_timestamp()::text`).Scan(&now))
	return now
}
