package faultsuite_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/publish/heraldnats"
)

// drainDeadline is how long after a fault healed every committed event
// must be published: generous for a loaded 2-core CI machine, and still
// far below what a stuck row would take (forever).
const drainDeadline = 90 * time.Second

// bound is the most duplicate publications a case allows, and the
// reasoning behind the number, for the failure message.
type bound struct {
	n   int
	why string
}

// outcome is what verify found, for checks of a case's own.
type outcome struct {
	events     int                 // committed events, each delivered
	duplicates int                 // publications beyond the first of each event
	relays     map[string][]string // event id -> relays that published it, in order
	stream     map[string]bool     // event id -> on the stream
}

// outboxRow is what verify reads of an outbox row.
type outboxRow struct {
	id, key, aggregateID, state string
	seq                         int64
}

// verify waits until every committed event was published, then checks
// the guarantees every case shares. The duplicate bound is asked for once
// everything was published, since a relay may fail an event again after
// the fault healed. logs is printed when the wait fails.
func (w *world) verify(t *testing.T, limit func() bound, logs func() string) outcome {
	t.Helper()
	w.waitDrained(t, logs)
	b := limit()
	rows := w.outboxRows(t)
	business := w.businessRows(t)
	stream := w.streamIDs(t)
	relays, total := w.tap.seen(t)

	byID := make(map[string]outboxRow, len(rows))
	for _, r := range rows {
		byID[r.id] = r
	}
	// Events other programs wrote take part in the ghost, duplicate and
	// order checks; what became of each is for their case to check.
	own := w.ownRows(rows)
	requireGate(t, own, business)
	w.requireLedger(t, business, byID, relays)

	delivered := map[string]bool{}
	for _, id := range stream {
		if _, ok := byID[id]; !ok {
			require.Failf(t, "ghost", "event %s is on the stream but no committed transaction wrote it", id)
		}
		if delivered[id] {
			require.Failf(t, "duplicate on the stream", "event %s stored twice: JetStream's deduplication by Nats-Msg-Id failed", id)
		}
		delivered[id] = true
	}
	for id := range relays {
		if _, ok := byID[id]; !ok {
			require.Failf(t, "ghost", "event %s was published but no committed transaction wrote it", id)
		}
	}
	var lost []string
	for _, r := range own {
		if !delivered[r.id] {
			lost = append(lost, r.id)
		}
	}
	require.Zerof(t, len(lost), "lost: %d committed events never reached the stream, e.g. %v", len(lost), first(lost))
	requireKeyOrder(t, stream, byID)

	dups := total - len(relays)
	require.LessOrEqualf(t, dups, b.n, "%d duplicate publications, more than %d: %s", dups, b.n, b.why)
	t.Logf("%d events, each delivered; %d duplicate publications (bound %d: %s)", len(own), dups, b.n, b.why)
	return outcome{events: len(own), duplicates: dups, relays: relays, stream: delivered}
}

// ownRows returns rows without those of w.foreign.
func (w *world) ownRows(rows []outboxRow) []outboxRow {
	foreign := make(map[string]bool, len(w.foreign))
	for _, id := range w.foreign {
		foreign[id] = true
	}
	return slices.DeleteFunc(slices.Clone(rows), func(r outboxRow) bool { return foreign[r.id] })
}

// waitDrained waits until no outbox row is left unpublished, those of
// w.foreign aside, then until the tap has seen everything the stream
// holds. A row is published only once JetStream confirmed it, so from then
// on a missing event is lost, not late.
func (w *world) waitDrained(t *testing.T, logs func() string) {
	t.Helper()
	ctx := t.Context()
	var status string
	drained := func() bool {
		total, ready, claimed, dead, err := w.db.states(ctx, w.foreign)
		if err != nil {
			status = err.Error()
			return false
		}
		status = fmt.Sprintf("%d rows: %d ready, %d claimed, %d dead", total, ready, claimed, dead)
		return ready+claimed+dead == 0
	}
	if !pollUntil(drainDeadline, 20*time.Millisecond, drained) {
		extra := ""
		if logs != nil {
			extra = "\nlogs:\n" + logs()
		}
		require.FailNowf(t, "stuck: not every committed event was published in time", "%s%s", status, extra)
	}
	caughtUp := func() bool {
		info, err := w.stream.Info(ctx)
		if err != nil {
			return false
		}
		relays, _ := w.tap.seen(t)
		status = fmt.Sprintf("%d messages on the stream, %d events seen by the tap", info.State.Msgs, len(relays))
		return len(relays) >= int(info.State.Msgs)
	}
	if !pollUntil(10*time.Second, 10*time.Millisecond, caughtUp) {
		require.FailNowf(t, "the tap missed messages the stream holds", "%s", status)
	}
}

// pollUntil calls cond every tick until it holds or d passed, and says
// whether it held.
func pollUntil(d, tick time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
}

// requireGate checks the outbox's own promise: every business row has
// exactly one event, and every event has its business row.
func requireGate(t *testing.T, rows []outboxRow, business []string) {
	t.Helper()
	events := map[string]int{}
	for _, r := range rows {
		events[r.aggregateID]++
	}
	isBusiness := map[string]bool{}
	var without []string
	for _, id := range business {
		isBusiness[id] = true
		if events[id] != 1 {
			without = append(without, fmt.Sprintf("%s (%d events)", id, events[id]))
		}
	}
	require.Zerof(t, len(without), "%d business rows without exactly one event, e.g. %v", len(without), first(without))
	var orphans []string
	for id := range events {
		if !isBusiness[id] {
			orphans = append(orphans, id)
		}
	}
	require.Zerof(t, len(orphans), "%d events without their business row, e.g. %v", len(orphans), first(orphans))
}

// requireLedger checks the in-process producers' own record: what they
// committed is there, what they rolled back is nowhere, and never
// published.
func (w *world) requireLedger(t *testing.T, business []string, byID map[string]outboxRow, relays map[string][]string) {
	t.Helper()
	w.ledger.mu.Lock()
	defer w.ledger.mu.Unlock()
	have := map[string]bool{}
	for _, id := range business {
		have[id] = true
	}
	for _, id := range w.ledger.committed {
		if !have[id] {
			require.Failf(t, "lost commit", "business row %s was committed and is gone", id)
		}
	}
	for _, id := range w.ledger.rolledBack {
		if have[id] {
			require.Failf(t, "rollback undone", "business row %s of a rolled-back transaction exists", id)
		}
	}
	for _, id := range w.ledger.rolledBackEv {
		if _, ok := byID[id]; ok {
			require.Failf(t, "rollback undone", "event %s of a rolled-back transaction is in the outbox", id)
		}
		if _, ok := relays[id]; ok {
			require.Failf(t, "ghost", "event %s of a rolled-back transaction was published", id)
		}
	}
}

// requireKeyOrder checks that, per key, events reached the stream in the
// order of their sequence, which is their commit order: each key belongs
// to one producer, which commits its transactions one after another.
func requireKeyOrder(t *testing.T, stream []string, byID map[string]outboxRow) {
	t.Helper()
	last := map[string]int64{}
	for _, id := range stream {
		r := byID[id]
		if r.seq <= last[r.key] {
			require.Failf(t, "order broken", "key %s: event seq %d reached the stream after seq %d", r.key, r.seq, last[r.key])
		}
		last[r.key] = r.seq
	}
}

func (w *world) outboxRows(t *testing.T) []outboxRow {
	t.Helper()
	out, err := w.db.outboxRows(t.Context())
	require.NoError(t, err)
	return out
}

func (w *world) businessRows(t *testing.T) []string {
	t.Helper()
	ids, err := w.db.businessRows(t.Context())
	require.NoError(t, err)
	return ids
}

// commitToBroker returns, for every committed event the tap saw, the time
// from its producer's commit to its first arrival at the broker, in
// increasing order.
func (w *world) commitToBroker(t *testing.T) []time.Duration {
	t.Helper()
	w.ledger.mu.Lock()
	defer w.ledger.mu.Unlock()
	w.tap.mu.Lock()
	defer w.tap.mu.Unlock()
	out := make([]time.Duration, 0, len(w.ledger.committedAt))
	for id, committed := range w.ledger.committedAt {
		if at, ok := w.tap.firstAt[id]; ok {
			out = append(out, at.Sub(committed))
		}
	}
	slices.Sort(out)
	return out
}

// quantile returns the q quantile of sorted (nearest rank); zero when
// empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// streamIDs reads the stream from the start: the event ids in the order
// JetStream stored them.
func (w *world) streamIDs(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	info, err := w.stream.Info(ctx)
	require.NoError(t, err)
	cons, err := w.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	ids := make([]string, 0, info.State.Msgs)
	for uint64(len(ids)) < info.State.Msgs {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		n := 0
		for m := range batch.Messages() {
			msg, err := heraldnats.ParseJetStream(m)
			require.NoError(t, err)
			ids = append(ids, msg.ID)
			n++
		}
		require.NoError(t, batch.Error())
		require.Positivef(t, n, "the stream holds %d messages; read %d", info.State.Msgs, len(ids))
	}
	return ids
}

// first returns at most five items, for a failure message.
func first(items []string) []string {
	slices.Sort(items)
	return items[:min(5, len(items))]
}

// logged is a relay or producer whose log a failure message shows.
type logged interface {
	logName() string
	String() string // the log
}

// joinLogs formats the logs of several relays or producers.
func joinLogs[T logged](items []T) string {
	var sb strings.Builder
	for _, it := range items {
		fmt.Fprintf(&sb, "--- %s\n%s", it.logName(), it)
	}
	return sb.String()
}
