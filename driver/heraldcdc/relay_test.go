package heraldcdc_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	kit "github.com/herald-outbox/herald/heraldtest" // the users' test kit (Recorder), not internal/testenv
	"github.com/herald-outbox/herald/internal/testenv"
)

// A relay in change-data-capture mode end to end: heraldpg's Driver as the
// store, a Source on the fixture's slot, and the users' Recorder as the
// publisher. What these tests check is the failure path: what the stream
// cannot publish goes to the table, the polling path delivers it in key
// order, and the slot confirms only what is settled.

// relayTimeout bounds every wait for the relay: generous, for a shared
// machine under -race.
const relayTimeout = 60 * time.Second

func (f fixture) driver(t *testing.T) *heraldpg.Driver {
	t.Helper()
	d, err := heraldpg.New(f.pool, &heraldpg.Config{})
	require.NoError(t, err)
	return d
}

// cdcSource opens the relay's Source, creating the slot, with a status
// update every 50ms and a heartbeat every 20ms: heartbeats move the slot
// past the events only once every earlier transaction is settled, so they
// are on, to be seen not to.
func (f fixture) cdcSource(t *testing.T) *heraldcdc.Source {
	t.Helper()
	src, err := heraldcdc.NewSource(context.Background(), heraldcdc.Config{ConnString: f.dsn, CreateSlot: true,
		StatusInterval: 50 * time.Millisecond, HeartbeatInterval: 20 * time.Millisecond, Logger: heralddrivertest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// startRelay starts a relay on store and src, polling every 5ms (20ms when
// idle) and retrying after 10ms, with an outage pause of at most 200ms.
// Registered after cdcSource, its cleanup stops the relay before the
// source is closed.
func startRelay(t *testing.T, store *heraldpg.Driver, src *heraldcdc.Source, pub herald.Publisher) *herald.Relay {
	t.Helper()
	r, err := herald.NewRelay(&herald.RelayConfig{Store: store, Source: src, Publisher: pub, Logger: heralddrivertest.Logger(t),
		BatchSize: 64, PollInterval: 5 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
		Retry:            herald.RetryPolicy{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond},
		OutageBackoffCap: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// probe reads the outbox's committed inserts on a slot of its own, never
// confirmed, to learn where each transaction ends in the WAL: the exact
// position the relay's slot reaches once the transaction is settled, and
// must stay before while it is not. pg_current_wal_insert_lsn() gives only
// bounds: other WAL (heartbeats, the relay's own writes) may lie between a
// commit and the position read after it, and a slot that confirms only
// commit ends may never reach it.
type probe struct {
	s   *heraldcdc.Stream
	end map[string]pglogrepl.LSN // event id -> End of its transaction
}

func (f fixture) probe(t *testing.T) *probe {
	t.Helper()
	s, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, Slot: "herald_probe", CreateSlot: true,
		StatusInterval: time.Second, HeartbeatInterval: -1, Logger: heralddrivertest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return &probe{s: s, end: map[string]pglogrepl.LSN{}}
}

// endOf returns the End of the transaction that inserted the streamed
// event id.
func (p *probe) endOf(t *testing.T, id string) pglogrepl.LSN {
	t.Helper()
	for {
		if lsn, ok := p.end[id]; ok {
			return lsn
		}
		tx := next(t, p.s)
		for _, e := range tx.Events {
			p.end[e.ID] = tx.End
		}
	}
}

// written is what a test inserted, in commit order.
type written struct {
	ids   []string
	key   map[string]string   // id -> key
	byKey map[string][]string // key -> ids in commit order
	named map[string]string   // payload -> id
}

func newWritten() *written {
	return &written{key: map[string]string{}, byKey: map[string][]string{}, named: map[string]string{}}
}

// insert commits rows (topic, key, payload) in one transaction and
// records them; it returns their ids.
func (w *written) insert(t *testing.T, f fixture, rows ...[3]string) []string {
	t.Helper()
	ids := f.insert(t, rows...)
	for i, id := range ids {
		w.ids = append(w.ids, id)
		w.key[id] = rows[i][1]
		w.byKey[rows[i][1]] = append(w.byKey[rows[i][1]], id)
		w.named[rows[i][2]] = id
	}
	return ids
}

// payloadIs selects the envelope whose payload is p, for a Recorder's
// Failure set before the event is written.
func payloadIs(p string) func(herald.Envelope) bool {
	return func(env herald.Envelope) bool { return string(env.Payload) == p }
}

// waitPublished waits until every one of ids was published at least once.
func waitPublished(t *testing.T, rec *kit.Recorder, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
	defer cancel()
	missing := len(ids)
	err := rec.WaitUntil(ctx, func(results []kit.Result) bool {
		got := publishedSet(results)
		missing = 0
		for _, id := range ids {
			if !got[id] {
				missing++
			}
		}
		return missing == 0
	})
	require.NoError(t, err, "%d of %d events not published", missing, len(ids))
}

func publishedSet(results []kit.Result) map[string]bool {
	got := map[string]bool{}
	for _, r := range results {
		if r.Err == nil {
			got[r.Envelope.ID] = true
		}
	}
	return got
}

// firstDeliveries returns, for each key, the ids in the order of their
// first publication.
func firstDeliveries(published []herald.Envelope) map[string][]string {
	seen := map[string]bool{}
	out := map[string][]string{}
	for _, env := range published {
		if !seen[env.ID] {
			seen[env.ID] = true
			out[env.Key] = append(out[env.Key], env.ID)
		}
	}
	return out
}

// requireKeyOrder checks that each key's events were first published in
// the order they were written, leaving out those of skip.
func requireKeyOrder(t *testing.T, w *written, published []herald.Envelope, skip map[string]bool) {
	t.Helper()
	first := firstDeliveries(published)
	for key, ids := range w.byKey {
		want := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return skip[id] })
		require.Equal(t, want, first[key], "key %s: first deliveries in commit order", key)
	}
}

// row is what the table holds for an event.
type row struct {
	state     string
	attempts  int
	parked    bool
	lastError string
}

func (f fixture) rows(t *testing.T, ids []string) map[string]row {
	t.Helper()
	rs, err := f.pool.Query(context.Background(), `SELECT id::text, state, attempts, parked, coalesce(last_error, '')
		FROM herald_outbox WHERE id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	out := map[string]row{}
	for rs.Next() {
		var (
			id string
			r  row
		)
		require.NoError(t, rs.Scan(&id, &r.state, &r.attempts, &r.parked, &r.lastError))
		out[id] = r
	}
	require.NoError(t, rs.Err())
	require.Len(t, out, len(ids), "every event has its row")
	return out
}

// awaitConfirmedAt waits until the relay's slot confirmed lsn or past it.
func (f fixture) awaitConfirmedAt(t *testing.T, lsn pglogrepl.LSN, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return f.slotConfirmed(t) >= lsn }, relayTimeout, 20*time.Millisecond, msg)
}

// 20 keys of 30 events each, in 10 transactions that each carry three
// events of every key, interleaved. Key k03's 11th event fails twice, then
// gets through; key k07's 16th is refused for good.
func TestCDCRelayFailuresGoThroughTheTableInKeyOrder(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	store := f.driver(t)
	src := f.cdcSource(t)
	p := f.probe(t)
	rec := &kit.Recorder{}
	rec.Fail(kit.Failure{Match: payloadIs("k03-10"), Times: 2})
	rec.Fail(kit.Failure{Match: payloadIs("k07-15"), Err: herald.Permanent(errors.New("rejected by the broker"))})
	startRelay(t, store, src, rec)

	const keys, perKey, txs = 20, 30, 10
	w := newWritten()
	var last []string
	for tx := range txs {
		var rows [][3]string
		for j := range perKey / txs {
			for k := range keys {
				key := fmt.Sprintf("k%02d", k)
				rows = append(rows, [3]string{"orders", key, fmt.Sprintf("%s-%02d", key, tx*perKey/txs+j)})
			}
		}
		last = w.insert(t, f, rows...)
	}
	aFailed, bDead := w.named["k03-10"], w.named["k07-15"]
	aLater := w.byKey["k03"][11:]
	bLater := w.byKey["k07"][16:]
	notDelivered := map[string]bool{bDead: true}
	for _, id := range bLater {
		notDelivered[id] = true
	}
	var want []string
	for _, id := range w.ids {
		if !notDelivered[id] {
			want = append(want, id)
		}
	}

	waitPublished(t, rec, want)
	// Once the slot confirmed the last transaction, every streamed batch
	// was published or written back: the table holds its final word.
	f.awaitConfirmedAt(t, p.endOf(t, last[0]), "the slot confirms the last transaction")

	t.Run("EachKeyIsDeliveredInCommitOrder", func(t *testing.T) {
		requireKeyOrder(t, w, rec.Published(), notDelivered)
	})

	t.Run("TheRetriedEventGoesFirstInItsKey", func(t *testing.T) {
		var outcomes []error
		for _, r := range rec.Results() {
			if r.Envelope.ID == aFailed {
				outcomes = append(outcomes, r.Err)
			}
		}
		require.GreaterOrEqual(t, len(outcomes), 3)
		require.ErrorIs(t, outcomes[0], kit.ErrInjected)
		require.ErrorIs(t, outcomes[1], kit.ErrInjected)
		require.NoError(t, outcomes[2], "published at its third attempt")
		pos := map[string]int{}
		for i, env := range rec.Published() {
			if _, ok := pos[env.ID]; !ok {
				pos[env.ID] = i
			}
		}
		for _, id := range aLater {
			require.Greater(t, pos[id], pos[aFailed], "no later event of the key overtakes the failed one")
		}
	})

	t.Run("TheDeadEventParksItsKeyInTheTable", func(t *testing.T) {
		var tries int
		for _, r := range rec.Results() {
			if r.Envelope.ID == bDead {
				tries++
				require.True(t, herald.IsPermanent(r.Err))
			}
		}
		require.Equal(t, 1, tries, "a permanent failure is not retried")
		rows := f.rows(t, append([]string{bDead}, bLater...))
		require.Equal(t, "dead", rows[bDead].state)
		require.True(t, rows[bDead].parked)
		require.Contains(t, rows[bDead].lastError, "rejected by the broker")
		for _, id := range bLater {
			require.Equal(t, row{state: "ready"}, rows[id], "held behind the parked key, its attempt refunded")
		}
		require.Never(t, func() bool {
			got := publishedSet(rec.Results())
			return slices.ContainsFunc(bLater, func(id string) bool { return got[id] })
		}, 500*time.Millisecond, 20*time.Millisecond, "nothing of the parked key goes out")
	})

	t.Run("NothingIsWrittenForAPublishedEvent", func(t *testing.T) {
		rows := f.rows(t, w.ids)
		aRows := map[string]bool{}
		for _, id := range w.byKey["k03"] {
			aRows[id] = true
		}
		for _, id := range w.ids {
			switch {
			case notDelivered[id]:
			case id == aFailed:
				require.Equal(t, "published", rows[id].state)
				require.Equal(t, 3, rows[id].attempts, "the stream's attempt and two claims")
				require.Contains(t, rows[id].lastError, kit.ErrInjected.Error())
			case aRows[id] && slices.Contains(aLater, id):
				// Written back behind the failed event, or streamed once
				// the table had no more of the key.
				require.Contains(t, []string{"published", "streamed"}, rows[id].state)
			default:
				require.Equal(t, "streamed", rows[id].state, "event %s of key %s", id, w.key[id])
			}
		}
	})
}

// gate is a publisher that holds every batch with an event it matches
// until the test opens it, then hands the batch to rec.
type gate struct {
	rec     *kit.Recorder
	match   func(herald.Envelope) bool
	held    chan struct{} // closed once a batch waits
	heldOne sync.Once
	open    chan struct{}
	opened  sync.Once
}

func newGate(rec *kit.Recorder, match func(herald.Envelope) bool) *gate {
	return &gate{rec: rec, match: match, held: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) Publish(ctx context.Context, batch []herald.Envelope) error {
	if slices.ContainsFunc(batch, g.match) {
		g.heldOne.Do(func() { close(g.held) })
		select {
		case <-g.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return g.rec.Publish(ctx, batch)
}

// awaitHeld waits until a batch waits at the gate.
func (g *gate) awaitHeld(t *testing.T, msg string) {
	t.Helper()
	select {
	case <-g.held:
	case <-time.After(relayTimeout):
		require.FailNow(t, msg)
	}
}

func (g *gate) release() { g.opened.Do(func() { close(g.open) }) }

// T1 carries an event the broker does not acknowledge yet; T2 to T5 of
// other keys commit after it. The slot stays before T1's end, heartbeats
// included, until the event is acknowledged.
func TestCDCRelayConfirmsNothingPastAnUnacknowledgedEvent(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	store := f.driver(t)
	src := f.cdcSource(t)
	p := f.probe(t)
	rec := &kit.Recorder{}
	g := newGate(rec, func(env herald.Envelope) bool { return env.Key == "held" })
	startRelay(t, store, src, g)
	t.Cleanup(g.release) // before the relay stops, should the test end early

	w := newWritten()
	t0 := w.insert(t, f, [3]string{"orders", "warm", "w1"}, [3]string{"orders", "warm", "w2"})
	waitPublished(t, rec, t0)
	end0 := p.endOf(t, t0[0])
	f.awaitConfirmedAt(t, end0, "the warm-up transaction is confirmed")
	require.Eventually(t, func() bool { return f.slotConfirmed(t) > end0 }, relayTimeout, 20*time.Millisecond,
		"heartbeats move the slot past it while nothing is pending")

	t1 := w.insert(t, f, [3]string{"orders", "held", "h1"}, [3]string{"orders", "k1", "a1"})
	var rest []string
	for i := 2; i <= 5; i++ {
		key := fmt.Sprintf("k%d", i)
		rest = w.insert(t, f, [3]string{"orders", key, key + "-1"}, [3]string{"orders", key, key + "-2"})
	}
	g.awaitHeld(t, "the batch of T1 never reached the publisher")
	end1, end5 := p.endOf(t, t1[0]), p.endOf(t, rest[0])

	require.Never(t, func() bool { return f.slotConfirmed(t) >= end1 }, 600*time.Millisecond, 20*time.Millisecond,
		"twelve status intervals and thirty heartbeats: the slot stays before T1's end")
	require.Less(t, src.Confirmed(), end1)
	require.Len(t, rec.Published(), len(t0), "nothing after T1 is published before T1's batch is done")

	g.release()
	waitPublished(t, rec, w.ids)
	f.awaitConfirmedAt(t, end5, "once acknowledged, the slot moves past T5")
	requireKeyOrder(t, w, rec.Published(), nil)
	for id, r := range f.rows(t, w.ids) {
		require.Equal(t, "streamed", r.state, "event %s: nothing written back", id)
	}
}

// The broker is down for a while: every batch fails as a whole. The
// stream's events go to the table as ready, their attempt refunded, and
// the slot moves on; once the broker is back, the polling path delivers
// them, each key in order.
func TestCDCRelayOutageWritesBackAndResumes(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	store := f.driver(t)
	src := f.cdcSource(t)
	p := f.probe(t)
	rec := &kit.Recorder{}
	down := errors.New("broker unreachable")
	rec.Fail(kit.Failure{WholeBatch: true, Err: down})
	relay := startRelay(t, store, src, rec)

	w := newWritten()
	var last []string
	for tx := range 4 {
		var rows [][3]string
		for j := range 2 {
			for k := range 5 {
				key := fmt.Sprintf("k%d", k)
				rows = append(rows, [3]string{"orders", key, fmt.Sprintf("%s-%d", key, tx*2+j)})
			}
		}
		last = w.insert(t, f, rows...)
	}

	var rows map[string]row
	require.Eventually(t, func() bool {
		rows = f.rows(t, w.ids)
		for _, r := range rows {
			if r.state != "ready" {
				return false
			}
		}
		return true
	}, relayTimeout, 20*time.Millisecond, "every event is written back as ready")
	withError := 0
	for id, r := range rows {
		require.Zero(t, r.attempts, "event %s: an outage refunds the attempt", id)
		require.False(t, r.parked)
		if r.lastError != "" {
			require.Contains(t, r.lastError, down.Error())
			withError++
		}
	}
	require.Positive(t, withError, "the outage's error is kept")
	f.awaitConfirmedAt(t, p.endOf(t, last[0]), "the slot moves past what was written back")
	require.Empty(t, rec.Published())
	require.NotEmpty(t, rec.Results(), "the publisher was tried")
	require.Contains(t, relay.Health().Destination, down.Error())

	rec.ClearFailures()
	waitPublished(t, rec, w.ids)
	requireKeyOrder(t, w, rec.Published(), nil)
	require.Eventually(t, func() bool {
		for _, r := range f.rows(t, w.ids) {
			if r.state != "published" {
				return false
			}
		}
		return true
	}, relayTimeout, 20*time.Millisecond, "delivered by the polling path")
}

// Rows written as ready before the switch to streamed inserts, some before
// the slot and some after it, then streamed rows of the same keys: the
// polling path's catch-up and the stream deliver every event once, each
// key's ready events first. The catch-up is held at the publisher until
// the stream has met the keys it is working on, so that their streamed
// events go through the table behind them.
func TestCDCRelayCatchesUpRowsWrittenBeforeTheSwitch(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	f := setupPolled(t)
	store := f.driver(t)
	state, err := store.InsertState(ctx)
	require.NoError(t, err)
	require.Equal(t, "ready", state)

	w := newWritten()
	// Keys r* get only ready rows, s only streamed ones, k* both.
	write := func(keys []string, from, to int) {
		var rows [][3]string
		for i := from; i < to; i++ {
			for _, key := range keys {
				rows = append(rows, [3]string{"orders", key, fmt.Sprintf("%s-%d", key, i)})
			}
		}
		w.insert(t, f, rows...)
	}
	both := []string{"k0", "k1", "k2", "k3"}
	write(append(slices.Clone(both), "r0"), 0, 3) // before the slot
	src := f.cdcSource(t)
	write(append(slices.Clone(both), "r1"), 3, 5) // after the slot, still ready
	ready := slices.Clone(w.ids)
	require.NoError(t, store.StreamInserts(ctx, true))
	state, err = store.InsertState(ctx)
	require.NoError(t, err)
	require.Equal(t, "streamed", state)
	write(append(slices.Clone(both), "s"), 5, 8)
	write(append(slices.Clone(both), "s"), 8, 10)
	var streamedBoth []string // the streamed events of keys with ready rows
	for _, id := range w.ids[len(ready):] {
		if w.key[id] != "s" {
			streamedBoth = append(streamedBoth, id)
		}
	}
	rows := f.rows(t, w.ids)
	for _, id := range w.ids {
		want := "streamed"
		if slices.Contains(ready, id) {
			want = "ready"
		}
		require.Equal(t, want, rows[id].state)
	}

	rec := &kit.Recorder{}
	g := newGate(rec, func(env herald.Envelope) bool { return slices.Contains(ready, env.ID) })
	startRelay(t, store, src, g)
	t.Cleanup(g.release)
	g.awaitHeld(t, "the catch-up never reached the publisher")
	waitPublished(t, rec, w.byKey["s"])
	require.Eventually(t, func() bool {
		for _, r := range f.rows(t, streamedBoth) {
			if r.state != "ready" {
				return false
			}
		}
		return true
	}, relayTimeout, 20*time.Millisecond, "the stream writes the events of keys with rows waiting back behind them")
	require.ElementsMatch(t, w.byKey["s"], envIDs(rec.Published()), "only the key with nothing in the table went out")

	g.release()
	waitPublished(t, rec, w.ids)
	published := rec.Published()
	requireKeyOrder(t, w, published, nil)
	seen := map[string]bool{}
	for _, env := range published {
		require.False(t, seen[env.ID], "event %s of key %s delivered twice", env.ID, env.Key)
		seen[env.ID] = true
	}
	require.Eventually(t, func() bool {
		for id, r := range f.rows(t, w.ids) {
			want := "published"
			if w.key[id] == "s" {
				want = "streamed"
			}
			if r.state != want {
				return false
			}
		}
		return true
	}, relayTimeout, 20*time.Millisecond, "the catch-up and what was written back behind it are acknowledged in the table")
}

func envIDs(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, env := range envs {
		out[i] = env.ID
	}
	return out
}
