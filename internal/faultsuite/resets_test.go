package faultsuite_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The relay's connections to PostgreSQL are reset while a claim or an
// acknowledgement is in flight, again and again under load. Each time, the
// statements' answers are first held in the proxy, so the test knows what
// the reset caught: an ordered claim's transaction (rolled back by the
// reset), a claim's commit (committed, its answer lost: the relay must
// release the rows by their token) or an acknowledgement (committed or
// not: the relay retries it, and the token check makes a late retry
// change nothing).
func TestConnectionResetsMidClaimAndMidAck(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	px := testenv.NewProxy(t, w.pgAddr(t))
	const name = "fault-reset"
	r := w.startRelay(t, name, via{pg: px.Addr()})
	watch := watchRelayTx(t, w.pool, name)
	stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 5 * time.Millisecond})

	hits := map[string]int{}
	// At least 20 resets, and more until a claim's commit was caught too
	// (its window is narrow, so it is not required).
	for cycle := 0; cycle < 20 || (cycle < 50 && (hits[claimInTx] == 0 || hits[ack] == 0 || hits[claimCommit] == 0)); cycle++ {
		// Resets only while the relay is at work.
		before := w.published(t)
		require.Eventually(t, func() bool { return w.published(t) >= before+batchSize }, time.Minute, time.Millisecond,
			"the relay made no progress after reset %d; its log:\n%s", cycle, r)
		for _, k := range w.caught(t, px, name) {
			hits[k]++
		}
		px.Reset()
		px.Heal()
	}
	t.Logf("statements caught in flight by a reset: %v; relay: %+v", hits, r.relay.Stats())
	require.Positive(t, hits[claimInTx], "no reset caught a claim's transaction")
	require.Positive(t, hits[ack], "no reset caught an acknowledgement")
	stop()

	w.verify(t, observedBound(r), logsOf(r))
	watch.check(t)
}
