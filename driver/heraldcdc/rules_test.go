package heraldcdc_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	kit "github.com/herald-outbox/herald/heraldtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The two rules that keep the polling path and the change-data-capture
// path apart, as a service that embeds the relay meets them: through
// herald.Relay and heraldcdc alone, with no daemon around them.

// Rule one, the order: inserts turn streamed only once a slot reads the
// table. The relay with a Source does the switch as it starts (the
// Source made the slot first); rows inserted before it are ready and
// delivered by the relay's claims, those after it from the log.
func TestARelayWithASourceMakesInsertsStreamedOnceItsSlotExists(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	f := setupPolled(t)
	store := f.driver(t)
	w := newWritten()

	before := w.insert(t, f, [3]string{"orders", "k", "before the slot"})
	src := f.cdcSource(t)
	state, err := store.InsertState(ctx)
	require.NoError(t, err)
	require.Equal(t, "ready", state, "making the slot switches nothing")
	between := w.insert(t, f, [3]string{"orders", "k", "after the slot, before the relay"})

	rec := &kit.Recorder{}
	relay := startRelay(t, store, src, rec)
	state, err = store.InsertState(ctx)
	require.NoError(t, err)
	require.Equal(t, "streamed", state, "Start makes inserts streamed")
	after := w.insert(t, f, [3]string{"orders", "k", "after the switch"})
	rows := f.rows(t, w.ids)
	require.Equal(t, "streamed", rows[after[0]].state)

	waitPublished(t, rec, w.ids)
	requireKeyOrder(t, w, rec.Published(), nil)
	require.Positive(t, relay.Stats().Streamed, "the event after the switch came from the log")
	// The streamed event is published from the log and its row left as
	// it is, unless it reached the relay while the key's earlier events
	// were still in the table: then it was held back behind them, its row
	// written back ready, and the claims published and acknowledged it.
	// Every event is published by now, so HeldBack has its final count.
	want := "streamed"
	if relay.Stats().HeldBack > 0 {
		want = "published"
	}
	require.Eventually(t, func() bool {
		rows := f.rows(t, w.ids)
		return rows[before[0]].state == "published" && rows[between[0]].state == "published" && rows[after[0]].state == want
	}, relayTimeout, 20*time.Millisecond, "the ready rows are claimed and acknowledged, the one after the switch is %s", want)
}

// The wrong order, by hand: inserts made streamed while no slot exists.
// The event inserted in that window is a row no claim takes, and a slot
// made now would start after it. The source refuses to make one, with or
// without CreateSlot, and says how to recover; following that, the event
// is delivered.
func TestASlotIsRefusedForATableStreamedBeforeIt(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	f := setupPolled(t)
	store := f.driver(t)
	require.NoError(t, store.StreamInserts(ctx, true))
	w := newWritten()
	window := w.insert(t, f, [3]string{"orders", "k", "streamed while no slot existed"})
	require.Equal(t, "streamed", f.rows(t, window)[window[0]].state)

	var since string
	for _, create := range []bool{true, false} {
		_, err := heraldcdc.NewSource(ctx, heraldcdc.Config{ConnString: f.dsn, CreateSlot: create, Logger: heralddrivertest.Logger(t)})
		require.ErrorContains(t, err, `the inserts of "public"."herald_outbox" default to the streamed state, but no replication slot reads the table`,
			"create %v", create)
		require.ErrorContains(t, err, "Let the relay make inserts streamed")
		m := regexp.MustCompile(`--requeue-since (\S+)`).FindStringSubmatch(err.Error())
		require.NotNil(t, m, "the error gives the recovery: %v", err)
		since = m[1]
	}
	_, err := heraldcdc.SlotStatus(ctx, f.pool, "herald_outbox")
	require.ErrorIs(t, err, heraldcdc.ErrNoSlot, "no slot was made over the window")

	// The recovery the error gives, through the library.
	at, err := time.Parse(time.RFC3339, since)
	require.NoError(t, err)
	require.NoError(t, store.StreamInserts(ctx, false))
	n, err := store.RequeueStreamed(ctx, at, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the window's event is ready for the claims")

	rec := &kit.Recorder{}
	startRelay(t, store, f.cdcSource(t), rec)
	w.insert(t, f, [3]string{"orders", "k", "after the slot"})
	waitPublished(t, rec, w.ids)
	requireKeyOrder(t, w, rec.Published(), nil)
}

// Rule two: a relay without a Source refuses a table whose inserts are
// streamed, since it would claim none of its new events while looking
// healthy. Once the table is switched back, it starts and delivers.
func TestAPollingRelayRefusesAStreamedTable(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	f := setup(t)
	store := f.driver(t)
	polling := func(pub herald.Publisher) *herald.Relay {
		r, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: pub, Logger: heralddrivertest.Logger(t),
			PollInterval: 5 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
		return r
	}

	err := polling(&kit.Recorder{}).Start(ctx)
	require.ErrorContains(t, err, `table "public"."herald_outbox" is relayed by change-data-capture`)
	require.ErrorContains(t, err, "Start it with a Source")
	require.ErrorContains(t, err, "herald source poll")
	state, err := store.InsertState(ctx)
	require.NoError(t, err)
	require.Equal(t, "streamed", state, "the refusal changes nothing")

	require.NoError(t, store.StreamInserts(ctx, false))
	rec := &kit.Recorder{}
	require.NoError(t, polling(rec).Start(ctx))
	w := newWritten()
	w.insert(t, f, [3]string{"orders", "k", "polled"})
	waitPublished(t, rec, w.ids)
}
