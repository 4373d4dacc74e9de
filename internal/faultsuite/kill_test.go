package faultsuite_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// Five relays run as processes, and one after another is SIGKILLed while
// it holds claims, then replaced. A killed relay may have published events
// it never acknowledged; the others rescue them when the lease expires and
// publish them again. Every duplicate must trace back to a killed relay,
// and there can be no more than the killed relays had in flight.
func TestFiveRelayProcessesKilledUnderLoad(t *testing.T) {
	testenv.Long(t)
	const relays, kills = 5, 4
	w := newWorld(t)
	watch := watchRelayTx(t, w.pool, "fault-kill-")
	var alive, all []*child
	start := func() {
		c := w.startChild(t, "relay", fmt.Sprintf("fault-kill-%d", len(all)))
		alive, all = append(alive, c), append(all, c)
	}
	for range relays {
		start()
	}
	stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 5 * time.Millisecond})
	logs := func() string { return joinLogs(all) }

	claimedBy := func(relay string) int { return w.heldBy(t, relay) }
	killed := map[string]bool{}
	for range kills {
		before := w.published(t)
		require.Eventually(t, func() bool { return w.published(t) >= before+300 }, time.Minute, time.Millisecond,
			"no progress; relay logs:\n%s", logs())
		var victim *child
		require.Eventually(t, func() bool {
			for _, i := range rand.Perm(len(alive)) {
				if claimedBy(alive[i].name) > 0 {
					victim = alive[i]
					return true
				}
			}
			return false
		}, time.Minute, time.Millisecond, "no relay held a claim")
		victim.kill(t)
		killed[victim.name] = true
		t.Logf("killed %s; %d of its claimed rows left to rescue", victim.name, claimedBy(victim.name))
		alive = slices.DeleteFunc(alive, func(c *child) bool { return c == victim })
		start()
	}
	before := w.published(t)
	require.Eventually(t, func() bool { return w.published(t) >= before+300 }, time.Minute, time.Millisecond,
		"no progress after the last kill; relay logs:\n%s", logs())
	stop()

	out := w.verify(t, func() bound {
		return bound{n: kills * maxInFlight * batchSize, why: fmt.Sprintf(
			"%d kills, each relay holding at most %d batches of %d", kills, maxInFlight, batchSize)}
	}, logs)
	for id, rs := range out.relays {
		if len(rs) > 1 {
			require.Truef(t, killed[rs[0]], "event %s published by %v: a duplicate must start with a killed relay", id, rs)
		}
	}
	stopAll(t, alive)
	watch.check(t)
}
