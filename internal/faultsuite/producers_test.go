package faultsuite_test

import (
	"bufio"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// Producers run as processes that commit a business row and its event in
// one transaction (herald.Writer joining the producer's pgx transaction),
// and are SIGKILLed while a transaction is open. The database rolls the
// transaction back: afterwards every business row has its one event and
// every event its business row, nothing a producer saw committed is
// missing, and the relay publishes exactly the committed events.
func TestProducerProcessesKilledMidTransaction(t *testing.T) {
	testenv.Long(t)
	const producers, kills, orders = 3, 6, 2000
	w := newWorld(t)
	const relay = "fault-prod-relay"
	r := w.startRelay(t, relay, via{})
	watch := watchRelayTx(t, w.pool, relay)
	var alive, all []*child
	start := func() {
		c := w.startChild(t, "producer", fmt.Sprintf("fault-prod-%d", len(all)))
		alive, all = append(alive, c), append(all, c)
	}
	for range producers {
		start()
	}

	var victims []*child
	for range kills {
		var victim *child
		require.Eventually(t, func() bool {
			for _, c := range alive {
				if w.inTransaction(t, c.name) {
					victim = c
					return true
				}
			}
			return false
		}, time.Minute, time.Millisecond, "no producer was inside a transaction; their logs:\n%s", joinLogs(all))
		victim.kill(t)
		victims = append(victims, victim)
		alive = slices.DeleteFunc(alive, func(c *child) bool { return c == victim })
		start()
	}
	require.Eventually(t, func() bool { return w.businessCount(t) >= orders }, time.Minute, 5*time.Millisecond,
		"the producers committed too little; their logs:\n%s", joinLogs(all))
	stopAll(t, alive)

	w.verify(t, observedBound(r), logsOf(r))
	watch.check(t)
	business := map[string]bool{}
	for _, id := range w.businessRows(t) {
		business[id] = true
	}
	for _, c := range all {
		for _, id := range c.committed() {
			require.Truef(t, business[id], "producer %s committed order %s, which is gone", c.name, id)
		}
	}
	// A kill inside a transaction leaves the order it had begun without a
	// commit: it must be gone, unless the kill came right after the commit
	// and before the producer said so. At least one kill must have undone
	// a transaction, or the case killed nothing in flight.
	undone := 0
	for _, c := range victims {
		if id := c.uncommitted(); id != "" && !business[id] {
			undone++
		}
	}
	t.Logf("%d producers killed; %d of them inside a transaction the database rolled back", len(victims), undone)
	require.Positive(t, undone, "no kill caught a transaction in flight")
}

// businessCount counts the business rows.
func (w *world) businessCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, w.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+w.orders).Scan(&n))
	return n
}

// committed returns the orders a producer saw committed ("c <id>" lines).
func (c *child) committed() []string {
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(c.out.String()))
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "c "); ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// uncommitted returns the last order a producer began ("b <id>") without
// seeing it committed, or "".
func (c *child) uncommitted() string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(c.out.String()))
	for sc.Scan() {
		line := sc.Text()
		if id, ok := strings.CutPrefix(line, "b "); ok {
			last = id
		} else if id, ok := strings.CutPrefix(line, "c "); ok && id == last {
			last = ""
		}
	}
	return last
}
