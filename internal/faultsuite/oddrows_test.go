package faultsuite_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/pgodd"
	"github.com/herald-outbox/herald/internal/testenv"
)

// Other programs write the outbox with plain SQL, and the rows they wrote
// before migration 004 added its checks may hold values the column types
// admit but no relay writes: an attempt count at the integer maximum,
// timestamps at infinity, a claim with no token or an endless lease. Such
// rows are written round after round while producers commit through the
// Writer and two relays publish: one straight to PostgreSQL, the other
// through a proxy that cuts its connections while it holds some of the odd
// rows. Every odd row must end as its kind says (published with the
// attempt its claim counted, dead with the reason, or waiting when it is
// never due), every other event goes as in every case, and the relay no
// fault touches never reports its database (or broker) failing: an odd
// value that failed a claim would show there.
func TestOddRowsUnderLoad(t *testing.T) {
	testenv.Long(t)
	w := newWorld(t)
	w.dropChecks(t)
	pgPx, natsPx := testenv.NewProxy(t, w.pgAddr(t)), testenv.NewProxy(t, w.natsAddr())
	// The cut relay's broker answers late, so that the relay holds each
	// claim long enough for the test to see it holding odd rows.
	natsPx.Latency(20 * time.Millisecond)
	const steady, cut = "fault-odd-steady", "fault-odd-cut"
	a := w.startRelay(t, steady, via{})
	b := w.startRelay(t, cut, via{pg: pgPx.Addr(), nats: natsPx.Addr()})
	watch := watchRelayTx(t, w.pool, "fault-odd-")
	healthA, healthB := watchHealth(t, a), watchHealth(t, b)
	stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 5 * time.Millisecond})

	var odd []heralddrivertest.OddRow
	cuts, hits := 0, map[string]int{}
	for round := 0; round < 3 || (cuts < 2 && round < 20); round++ {
		// The other keys keep flowing with odd rows in the outbox.
		before := w.published(t)
		require.Eventually(t, func() bool { return w.published(t) >= before+batchSize }, time.Minute, time.Millisecond,
			"no progress with odd rows in the outbox (round %d); relay logs:\n%s", round, logsOf(a, b)())
		rows := w.writeOddRows(t, fmt.Sprintf("odd-%d", round))
		odd = append(odd, rows...)
		held := func() bool {
			return w.count(t, `state = 'claimed' AND claimed_by = $1 AND id::text = ANY($2::text[])`, cut, oddIDs(rows)) > 0
		}
		if !pollUntil(time.Minute, time.Millisecond, func() bool { return held() || len(w.unsettled(t, rows)) == 0 }) {
			require.FailNowf(t, "stuck: odd rows never reached the state their kind says", "round %d: %q\nrelay logs:\n%s",
				round, w.unsettled(t, rows), logsOf(a, b)())
		}
		require.Empty(t, healthA.errors(), "relay a, which no fault touches, reported its database or broker failing")
		if !held() {
			continue // relay a took them all
		}
		caught := w.caught(t, pgPx, cut)
		if held() {
			cuts++ // relay b's connections are cut while it holds odd rows
			for _, k := range caught {
				hits[k]++
			}
		}
		pgPx.Reset()
		pgPx.Heal()
	}
	t.Logf("%d odd rows written; relay b's connections cut %d times while it held some, catching in flight: %v",
		len(odd), cuts, hits)
	require.Positive(t, cuts, "relay b never held odd rows when its connections were cut")
	stop()

	if !pollUntil(drainDeadline, 20*time.Millisecond, func() bool { return len(w.unsettled(t, odd)) == 0 }) {
		require.FailNowf(t, "stuck: odd rows never reached the state their kind says", "%q\nrelay logs:\n%s",
			w.unsettled(t, odd), logsOf(a, b)())
	}
	out := w.verify(t, observedBound(a, b), logsOf(a, b))
	watch.check(t)
	require.Empty(t, healthA.errors(), "relay a, which no fault touches, reported its database or broker failing")
	for _, e := range healthB.errors() {
		// A cut fails a claim with a connection error; a value out of
		// range (SQLSTATE class 22) can only come from an odd row.
		require.NotContains(t, e, "SQLSTATE 22", "relay b reported an odd value failing its claims")
	}
	require.Empty(t, b.relay.Health().Database, "relay b's database is reachable again")
	w.requireOddRows(t, odd, out, cut)
}

// dropChecks drops migration 004's checks from the outbox table, as on a
// table whose rows predate them. It runs before any relay or producer: the
// ALTER TABLE waits for every transaction on the table and holds up every
// later one, which would be the test's doing, not the relays'.
func (w *world) dropChecks(t *testing.T) {
	t.Helper()
	var drop []string
	for _, c := range pgodd.Checks {
		drop = append(drop, `DROP CONSTRAINT "herald_outbox_`+c+`"`)
	}
	_, err := w.pool.Exec(t.Context(), `ALTER TABLE `+w.store.Table()+` `+strings.Join(drop, ", "))
	require.NoError(t, err)
}

// writeOddRows writes oddRows on the case's topic, in one transaction, each
// with a key of its own named after prefix, and adds them to w.foreign.
func (w *world) writeOddRows(t *testing.T, prefix string) []heralddrivertest.OddRow {
	t.Helper()
	out := make([]heralddrivertest.OddRow, len(pgodd.Rows))
	err := pgx.BeginFunc(t.Context(), w.pool, func(tx pgx.Tx) error {
		for i, r := range pgodd.Rows {
			out[i] = r.Want
			err := tx.QueryRow(t.Context(), `INSERT INTO `+w.store.Table()+` (topic, key, payload, `+r.Cols+`)
				VALUES ($1, $2, 'x', `+r.Value+`) RETURNING id::text`, topic, fmt.Sprintf("%s-%d", prefix, i)).Scan(&out[i].ID)
			if err != nil {
				return fmt.Errorf("%s: %w", r.Want.Class, err)
			}
		}
		return nil
	})
	require.NoError(t, err)
	w.foreign = append(w.foreign, oddIDs(out)...)
	return out
}

func oddIDs(rows []heralddrivertest.OddRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids
}

// oddState is what requireOddRows reads of an odd row.
type oddState struct {
	state     heraldadmin.State
	attempts  int
	lastError string
}

// oddStates reads what the outbox holds of rows; a row gone from it is
// missing from the map.
func (w *world) oddStates(t *testing.T, rows []heralddrivertest.OddRow) (map[string]oddState, error) {
	t.Helper()
	res, err := w.pool.Query(t.Context(), `SELECT id::text, state, attempts, coalesce(last_error, '')
		FROM `+w.store.Table()+` WHERE id::text = ANY($1::text[])`, oddIDs(rows))
	if err != nil {
		return nil, err
	}
	out := map[string]oddState{}
	var (
		id string
		s  oddState
	)
	_, err = pgx.ForEachRow(res, []any{&id, &s.state, &s.attempts, &s.lastError}, func() error {
		out[id] = s
		return nil
	})
	return out, err
}

// unsettled describes the rows of rows not in the state they must end in
// (all of them while the outbox cannot be read).
func (w *world) unsettled(t *testing.T, rows []heralddrivertest.OddRow) []string {
	t.Helper()
	states, err := w.oddStates(t, rows)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, r := range rows {
		if s := states[r.ID]; s.state != r.Want {
			out = append(out, fmt.Sprintf("%s (%s): %s, attempts %d, last error %q", r.Class, r.ID, s.state, s.attempts, s.lastError))
		}
	}
	return out
}

// requireOddRows checks what became of each odd row: its state; the
// reason of a dead one; no attempt spent on one never due; and, for one
// the relays deliver, that it is on the stream and counted the attempt
// its kind says, for the others that no relay published it. A claim
// whose connection a cut broke is released or acknowledged by its token
// and spends no attempt; only a row rescued from relay cut past its lease
// may have counted more.
func (w *world) requireOddRows(t *testing.T, odd []heralddrivertest.OddRow, out outcome, cut string) {
	t.Helper()
	states, err := w.oddStates(t, odd)
	require.NoError(t, err)
	for _, r := range odd {
		s, ok := states[r.ID]
		require.Truef(t, ok, "%s: %s is gone from the outbox", r.Class, r.ID)
		require.Equalf(t, r.Want, s.state, "%s: %s", r.Class, r.ID)
		switch r.Want {
		case heraldadmin.StateDead:
			require.Containsf(t, s.lastError, r.Reason, "%s: %s", r.Class, r.ID)
		case heraldadmin.StateReady:
			require.Zerof(t, s.attempts, "%s: %s: a row left waiting spent no attempt", r.Class, r.ID)
		}
		if !r.Delivered {
			require.Falsef(t, out.stream[r.ID], "%s: %s is on the stream", r.Class, r.ID)
			require.Emptyf(t, out.relays[r.ID], "%s: %s was published", r.Class, r.ID)
			continue
		}
		require.Truef(t, out.stream[r.ID], "%s: %s never reached the stream", r.Class, r.ID)
		switch {
		case r.Attempt == 0:
		case strings.Contains(s.lastError, "relay "+cut+" did not acknowledge"):
			require.GreaterOrEqualf(t, s.attempts, r.Attempt, "%s: %s", r.Class, r.ID)
		default:
			require.Equalf(t, r.Attempt, s.attempts, "%s: %s: the attempt its delivery counted", r.Class, r.ID)
		}
	}
}

// healthWatch polls a relay's Health while a case runs and keeps every
// distinct error it reports, of its database or its broker.
type healthWatch struct {
	mu   sync.Mutex
	seen map[string]bool
}

// watchHealth watches r until the test ends.
func watchHealth(t *testing.T, r *inproc) *healthWatch {
	t.Helper()
	h := &healthWatch{seen: map[string]bool{}}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			hl := r.relay.Health()
			h.mu.Lock()
			for what, e := range map[string]string{"database": hl.Database, "broker": hl.Destination} {
				if e != "" {
					h.seen[what+": "+e] = true
				}
			}
			h.mu.Unlock()
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	t.Cleanup(func() { close(done); wg.Wait() })
	return h
}

// errors returns what the watch saw so far.
func (h *healthWatch) errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for e := range h.seen {
		out = append(out, e)
	}
	return out
}
