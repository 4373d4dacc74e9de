package faultsuite_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// One of two relays is cut off from PostgreSQL (every byte held, both
// ways, connections left open, as in a network partition) while it holds
// claimed batches, for longer than its lease. It publishes what it had
// claimed but cannot acknowledge it; the other relay rescues the rows when
// the lease expires and publishes them again. When the partition heals,
// whatever the cut-off relay still sends with its old claims must change
// nothing, and it must go back to work. The test cuts between two of the
// relay's transactions; a cut inside one is the case below, so the
// cut-off relay's transactions are watched before the cut and from the
// heal on, the other relay's throughout.
func TestRelayCutOffFromPostgresPastItsLease(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	px := testenv.NewProxy(t, w.pgAddr(t))
	const cut, other = "fault-cut-a", "fault-cut-b"
	a := w.startRelay(t, cut, via{pg: px.Addr()})
	b := w.startRelay(t, other, via{})
	watchA, watchB := watchRelayTx(t, w.pool, cut), watchRelayTx(t, w.pool, other)
	// Until relay a is back at work after the partition: a few thousand
	// events.
	stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 20 * time.Millisecond})

	claimedBy := func(relay string) int { return w.heldBy(t, relay) }
	// Cut while relay a holds claims and no transaction: otherwise heal
	// and try again.
	for held := false; !held; {
		require.Eventually(t, func() bool { return claimedBy(cut) > 0 }, time.Minute, time.Millisecond,
			"relay a never held a claim")
		px.Pause(testenv.BothWays)
		// A statement sent just before the cut still runs; what relay a
		// holds once none runs is stranded.
		w.waitIdle(t, cut)
		if held = claimedBy(cut) > 0 && !w.inTransaction(t, cut); !held {
			px.Heal()
		}
	}
	watchA.check(t)
	stranded := claimedBy(cut)
	// The rows' leases end when the database says, counted from their
	// claim, which may be well before the cut on a loaded machine.
	leaseEnds := w.leaseEndOf(t, cut)
	publishedByA := a.relay.Stats().Published
	require.Eventually(t, func() bool { return claimedBy(cut) == 0 }, time.Minute, 10*time.Millisecond,
		"relay b never rescued relay a's rows")
	var rescuedBy time.Time
	require.NoError(t, w.pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&rescuedBy))
	require.False(t, rescuedBy.Before(leaseEnds), "rows were taken from relay a before their lease ended (%s < %s)", rescuedBy, leaseEnds)
	px.Heal()
	watchA = watchRelayTxSince(t, w.pool, cut, dbNow(t, w.pool))
	require.Eventually(t, func() bool { return a.relay.Stats().Published > publishedByA }, time.Minute, 10*time.Millisecond,
		"relay a did not go back to work after the partition; its log:\n%s", a)
	stop()

	w.verify(t, observedBound(a, b), logsOf(a, b))
	watchA.check(t)
	watchB.check(t)
	t.Logf("relay a was cut off holding %d claimed rows", stranded)
	require.Positive(t, b.obs.rescued.Load(), "relay b rescued relay a's rows")
	require.Truef(t, strings.Contains(a.log.String(), "lease expired before") ||
		strings.Contains(a.log.String(), "the rows will be rescued when their lease expires"),
		"relay a noticed it lost its claims; its log:\n%s", a)
}

// A relay is cut off in the middle of an ordered claim's transaction,
// after the walk of the keys took their advisory locks. PostgreSQL keeps
// waiting for the relay's next statement, so unless the transaction ends
// on its own, the keys stay locked, and unclaimable by any other relay,
// for as long as the partition lasts (or, if the relay's host is gone,
// until TCP keepalive notices: two hours by default).
func TestRelayCutOffInsideAClaimTransaction(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	px := testenv.NewProxy(t, w.pgAddr(t))
	const cut = "fault-intx"
	a := w.startRelay(t, cut, via{pg: px.Addr()})
	stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 5 * time.Millisecond})

	// Hold the answers until one of the relay's sessions waits inside a
	// claim's transaction, just after a walk that locked keys; then cut it
	// off entirely.
	for cycle := 0; !w.walkedInTransaction(t, px, cut) || w.advisoryLocks(t, cut) == 0; cycle++ {
		require.Less(t, cycle, 200, "never caught the relay inside a claim's transaction")
		px.Heal()
		before := w.published(t)
		require.Eventually(t, func() bool { return w.published(t) > before }, time.Minute, time.Millisecond,
			"the relay made no progress; its log:\n%s", a)
	}
	px.Pause(testenv.BothWays)
	locks := w.advisoryLocks(t, cut)
	ended := pollUntil(3*longTx, 10*time.Millisecond, func() bool { return !w.inTransaction(t, cut) })
	px.Heal()
	stop()
	w.verify(t, observedBound(a), logsOf(a))
	require.Truef(t, ended, "the relay's claim transaction, holding %d key locks, stayed open through %s of partition", locks, 3*longTx)
}

// walkedInTransaction pauses the answers to app's sessions and reports
// whether one of them waits inside a claim's transaction after its walk.
// The answers stay paused.
func (w *world) walkedInTransaction(t *testing.T, px *testenv.Proxy, app string) bool {
	t.Helper()
	w.caught(t, px, app)
	for _, s := range w.sessions(t, app) {
		if s.state == "idle in transaction" && strings.Contains(s.query, "WITH RECURSIVE walk") {
			return true
		}
	}
	return false
}

// inTransaction reports whether a session of app has a transaction open.
func (w *world) inTransaction(t *testing.T, app string) bool {
	t.Helper()
	for _, s := range w.sessions(t, app) {
		if strings.HasPrefix(s.state, "idle in transaction") {
			return true
		}
	}
	return false
}

// advisoryLocks counts the advisory locks app's sessions hold.
func (w *world) advisoryLocks(t *testing.T, app string) int {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks l
		JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = $1`, app).Scan(&n))
	return n
}
