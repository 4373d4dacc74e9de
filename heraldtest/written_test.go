package heraldtest_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldtest"
)

func TestWrittenOnSQLite(t *testing.T) {
	t.Parallel()
	exerciseWritten(t, sqliteOutbox)
}

func TestWrittenOnPostgresWithPgx(t *testing.T) {
	t.Parallel()
	exerciseWritten(t, pgxOutbox)
}

func TestWrittenOnPostgresWithDatabaseSQL(t *testing.T) {
	t.Parallel()
	exerciseWritten(t, pgSQLOutbox)
}

// placed is the event most cases write: an order placed.
func placed(id string, total int) herald.Message {
	return herald.Message{
		Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: id,
		Payload: []byte(`{"id":"` + id + `","total":` + strconv.Itoa(total) + `}`),
		Headers: map[string]string{"tenant": "acme", "traceparent": "00-abc-def-01"},
	}
}

// exerciseWritten runs the cases of RequireWrittenTx, RequireWritten and
// their negations on one database and one kind of transaction.
func exerciseWritten[TTx any](t *testing.T, newOutbox func(t *testing.T) *outbox[TTx]) {
	ctx := context.Background()

	t.Run("UncommittedRowsAreVisibleInsideTheTransactionOnly", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200), placed("o-2", 990))

		ft := &fakeT{}
		rows := heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx,
			heraldtest.Event{Topic: "orders.placed", Key: "o-2", JSON: `{"total": 990, "id": "o-2"}`},
			heraldtest.Event{Topic: "orders.placed", Key: "o-1", Type: "order.placed",
				AggregateType: "order", AggregateID: "o-1", Payload: []byte(`{"id":"o-1","total":4200}`),
				Headers: map[string]string{"tenant": "acme"}},
		)
		ft.requirePassed(t)
		require.Len(t, rows, 2)
		require.Equal(t, "o-2", rows[0].Key, "rows come back in the order of the expectations")
		require.Equal(t, "o-1", rows[1].Key)
		require.Less(t, rows[1].Seq, rows[0].Seq, "and carry their insert order")
		require.Equal(t, heraldadmin.StateReady, rows[0].State)

		ft = &fakeT{}
		heraldtest.RequireNotWritten(ctx, ft, o.store, heraldtest.Event{Topic: "orders.placed"})
		ft.requirePassed(t)

		o.commit(t, tx)
		ft = &fakeT{}
		heraldtest.RequireWritten(ctx, ft, o.store,
			heraldtest.Event{Topic: "orders.placed", Key: "o-1"},
			heraldtest.Event{Topic: "orders.placed", Key: "o-2"},
		)
		ft.requirePassed(t)
	})

	t.Run("RolledBackRowsAreAbsentAfterTheRollback", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200))
		o.rollback(t, tx)

		ft := &fakeT{}
		heraldtest.RequireNotWritten(ctx, ft, o.store)
		ft.requirePassed(t)

		ft = &fakeT{}
		require.Nil(t, heraldtest.RequireWritten(ctx, ft, o.store, heraldtest.Event{Topic: "orders.placed", Key: "o-1"}))
		ft.requireFailed(t, "the committed outbox does not hold the expected events",
			`missing: expected event 1 {Topic: "orders.placed", Key: "o-1"}`, "holds no events at all")
	})

	t.Run("AnEventThatDiffersFailsAndSaysHow", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200))
		base := heraldtest.Event{Topic: "orders.placed", Key: "o-1"}
		for _, c := range []struct {
			name string
			mod  func(*heraldtest.Event)
			why  string
		}{
			{"type", func(e *heraldtest.Event) { e.Type = "order.paid" }, `type is "order.placed", want "order.paid"`},
			{"aggregate type", func(e *heraldtest.Event) { e.AggregateType = "cart" }, `aggregate type is "order", want "cart"`},
			{"aggregate id", func(e *heraldtest.Event) { e.AggregateID = "o-9" }, `aggregate id is "o-1", want "o-9"`},
			{"id", func(e *heraldtest.Event) { e.ID = "0190aaaa-0000-7000-8000-000000000000" }, "want 0190aaaa-0000-7000-8000-000000000000"},
			{"payload bytes", func(e *heraldtest.Event) { e.Payload = []byte(`{"id":"o-1", "total":4200}`) },
				`payload is {"id":"o-1","total":4200}, want {"id":"o-1", "total":4200}`},
			{"JSON value", func(e *heraldtest.Event) { e.JSON = map[string]any{"id": "o-1", "total": 42} },
				"payload differs from the expected JSON at $.total: 4200, want 42"},
			{"JSON key", func(e *heraldtest.Event) { e.JSON = `{"id":"o-1"}` },
				"payload differs from the expected JSON at $.total: 4200 is not expected"},
			{"header value", func(e *heraldtest.Event) { e.Headers = map[string]string{"tenant": "globex"} },
				`header "tenant" is "acme", want "globex"`},
			{"header missing", func(e *heraldtest.Event) { e.Headers = map[string]string{"region": "eu"} },
				`header "region" is missing, want "eu"`},
		} {
			want := base
			c.mod(&want)
			ft := &fakeT{}
			require.Nil(t, heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx, want), c.name)
			msg := ft.requireFailed(t, "the outbox seen through the transaction does not hold the expected events",
				"1 expected, 1 found on their topics and keys", "missing: expected event 1 "+want.String(), c.why)
			require.Len(t, lines(msg, "nearest: seq "), 1, c.name)
			require.Empty(t, lines(msg, "unexpected:"), "%s: the event in scope is the nearest, not reported twice", c.name)
		}
	})

	t.Run("AnEventWrittenTwiceFails", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200), placed("o-1", 4200))
		ft := &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx, heraldtest.Event{Topic: "orders.placed", Key: "o-1"})
		msg := ft.requireFailed(t, "1 expected, 2 found on their topics and keys")
		require.Len(t, lines(msg, `unexpected: seq `), 1)

		ft = &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx,
			heraldtest.Event{Topic: "orders.placed", Key: "o-1"}, heraldtest.Event{Topic: "orders.placed", Key: "o-1"})
		ft.requirePassed(t)
	})

	t.Run("AnEventExpectedTwiceButWrittenOnceFails", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200))
		ft := &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx,
			heraldtest.Event{Topic: "orders.placed", Key: "o-1"}, heraldtest.Event{Key: "o-1", Type: "order.placed"})
		ft.requireFailed(t, "missing: expected event 2", "which expected event 1 accounts for: expected twice, found once?")
	})

	t.Run("EventsOnOtherTopicsAndKeysAreIgnored", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		// Another test's committed events, sharing the table.
		o.commitNew(t, placed("o-7", 10), herald.Message{Topic: "carts.emptied", Key: "o-1", Payload: []byte("{}")})
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200))
		ft := &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx, heraldtest.Event{Topic: "orders.placed", Key: "o-1"})
		ft.requirePassed(t)

		ft = &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx, heraldtest.Event{Topic: "orders.placed"})
		msg := ft.requireFailed(t, "1 expected, 2 found on their topics and keys")
		require.Len(t, lines(msg, "unexpected: seq "), 1, "without a key, every event of the topic counts")
	})

	t.Run("AnEventOnTheWrongTopicShowsAsTheNearest", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		m := placed("o-1", 4200)
		m.Topic = "order.placed"
		o.write(t, tx, m)
		ft := &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx, heraldtest.Event{Topic: "orders.placed", Key: "o-1"})
		ft.requireFailed(t, "1 expected, 0 found on their topics and keys",
			`nearest: seq 1 id `, `topic is "order.placed", want "orders.placed"`)
	})

	t.Run("NotWrittenFailsOnAMatchingEventAndIgnoresOthers", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 4200))

		ft := &fakeT{}
		heraldtest.RequireNotWrittenTx(ctx, ft, o.reader, tx,
			heraldtest.Event{Topic: "orders.cancelled"}, heraldtest.Event{Topic: "orders.placed", Key: "o-2"})
		ft.requirePassed(t)

		ft = &fakeT{}
		heraldtest.RequireNotWrittenTx(ctx, ft, o.reader, tx,
			heraldtest.Event{Topic: "orders.cancelled"}, heraldtest.Event{Key: "o-1"})
		ft.requireFailed(t, "the outbox seen through the transaction holds events it should not",
			`topic "orders.placed" key "o-1"`, `matches {Key: "o-1"}`)

		ft = &fakeT{}
		heraldtest.RequireNotWrittenTx(ctx, ft, o.reader, tx)
		msg := ft.requireFailed(t, "holds events it should not")
		require.Empty(t, lines(msg, "matches"), "with no filter, every event is forbidden: nothing to name")
	})

	t.Run("NoExpectationIsAMistakeOfTheTest", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		ft := &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx)
		ft.requireFailed(t, "RequireWrittenTx needs at least one expected Event", "RequireNotWrittenTx")

		ft = &fakeT{}
		heraldtest.RequireWrittenTx(ctx, ft, o.reader, tx, heraldtest.Event{JSON: `{"total":`})
		ft.requireFailed(t, "expected event 1: Event.JSON is not valid JSON")
	})

	t.Run("TheReaderNarrowsByTopic", func(t *testing.T) {
		t.Parallel()
		o := newOutbox(t)
		tx := o.begin(t)
		o.write(t, tx, placed("o-1", 1), herald.Message{Topic: "a", Payload: []byte("x")},
			herald.Message{Topic: "b", Payload: []byte("y")})
		rows, err := o.reader.EventsTx(ctx, tx, "a", "orders.placed")
		require.NoError(t, err)
		require.Len(t, rows, 2)
		require.Equal(t, "orders.placed", rows[0].Topic, "in insert order")
		require.Equal(t, "a", rows[1].Topic)
		rows, err = o.reader.EventsTx(ctx, tx)
		require.NoError(t, err)
		require.Len(t, rows, 3, "no topic: every topic")
		rows, err = o.store.Events(ctx)
		require.NoError(t, err)
		require.Empty(t, rows, "nothing committed yet")
	})
}
