package heraldtest

import (
	"context"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// TxReader reads outbox rows through a transaction of type TTx, its own
// uncommitted rows included. heraldpg.NewReader (pgx.Tx),
// heraldpg.NewSQLReader and heraldsqlite.NewReader (*sql.Tx) return one.
type TxReader[TTx any] interface {
	// EventsTx returns the rows tx sees in insert order: all of them, or
	// those of the given topics.
	EventsTx(ctx context.Context, tx TTx, topics ...string) ([]heraldadmin.EventRow, error)
}

// Reader reads committed outbox rows. The drivers' stores,
// *heraldpg.Driver and *heraldsqlite.Driver, are Readers.
type Reader interface {
	// Events returns the committed rows in insert order: all of them, or
	// those of the given topics.
	Events(ctx context.Context, topics ...string) ([]heraldadmin.EventRow, error)
}

// RequireWrittenTx fails the test unless the outbox, seen through tx,
// holds exactly the events want describes: each expected event matches an
// event of its own, and every event whose topic and key agree with an
// expected event's is accounted for (an expected event without Topic or
// Key agrees with any). Events on other topics or keys, such as those of
// other tests sharing the database, are ignored; an extra event where one
// was expected, such as an event written twice, fails. Order does not
// matter: the rows returned, in the order of want, carry their Seq.
//
// tx may still be open: the rows it wrote are visible to it before it
// commits. Call it before the transaction ends.
func RequireWrittenTx[TTx any](ctx context.Context, t TB, r TxReader[TTx], tx TTx, want ...Event) []heraldadmin.EventRow {
	t.Helper()
	read := func(topics ...string) ([]heraldadmin.EventRow, error) { return r.EventsTx(ctx, tx, topics...) }
	return requireWritten(t, "RequireWrittenTx", "the outbox seen through the transaction", read, want)
}

// RequireWritten is RequireWrittenTx for committed events, read through
// the store (a *heraldpg.Driver or *heraldsqlite.Driver): after the
// transaction under test committed, or to check that one rolled back.
func RequireWritten(ctx context.Context, t TB, r Reader, want ...Event) []heraldadmin.EventRow {
	t.Helper()
	read := func(topics ...string) ([]heraldadmin.EventRow, error) { return r.Events(ctx, topics...) }
	return requireWritten(t, "RequireWritten", "the committed outbox", read, want)
}

// RequireNotWrittenTx fails the test if the outbox, seen through tx, holds
// an event that matches one of match; with no match, if it holds any event
// at all.
func RequireNotWrittenTx[TTx any](ctx context.Context, t TB, r TxReader[TTx], tx TTx, match ...Event) {
	t.Helper()
	read := func(topics ...string) ([]heraldadmin.EventRow, error) { return r.EventsTx(ctx, tx, topics...) }
	requireNotWritten(t, "the outbox seen through the transaction", read, match)
}

// RequireNotWritten is RequireNotWrittenTx for committed events, read
// through the store: after a rollback, nothing the transaction wrote may
// be there.
func RequireNotWritten(ctx context.Context, t TB, r Reader, match ...Event) {
	t.Helper()
	read := func(topics ...string) ([]heraldadmin.EventRow, error) { return r.Events(ctx, topics...) }
	requireNotWritten(t, "the committed outbox", read, match)
}

type readFunc func(topics ...string) ([]heraldadmin.EventRow, error)

func requireWritten(t TB, name, what string, read readFunc, want []Event) []heraldadmin.EventRow {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("heraldtest: %s needs at least one expected Event; to check that nothing was written, use RequireNotWritten or RequireNotWrittenTx", name)
		return nil
	}
	xs, err := compileAll(want)
	if err != nil {
		t.Fatalf("heraldtest: %v", err)
		return nil
	}
	topics := topicsOf(want)
	rows, err := read(topics...)
	if err != nil {
		t.Fatalf("heraldtest: reading %s: %v", what, err)
		return nil
	}
	matched, report := match(what, xs, envelopes(rows), nil)
	if report != "" && topics != nil {
		// Read again without narrowing, so that an event written on a
		// topic other than the expected one shows as the nearest. A table
		// too large to read whole leaves the first report as it is.
		if all, err := read(); err == nil {
			_, report = match(what, xs, envelopes(rows), envelopes(all))
		}
	}
	if report != "" {
		t.Fatalf("%s", report)
		return nil
	}
	out := make([]heraldadmin.EventRow, len(matched))
	for i, j := range matched {
		out[i] = rows[j]
	}
	return out
}

func requireNotWritten(t TB, what string, read readFunc, match []Event) {
	t.Helper()
	if len(match) == 0 {
		match = []Event{{}}
	}
	xs, err := compileAll(match)
	if err != nil {
		t.Fatalf("heraldtest: %v", err)
		return
	}
	rows, err := read(topicsOf(match)...)
	if err != nil {
		t.Fatalf("heraldtest: reading %s: %v", what, err)
		return
	}
	if report := forbidden(what, xs, envelopes(rows)); report != "" {
		t.Fatalf("%s", report)
	}
}

func envelopes(rows []heraldadmin.EventRow) []herald.Envelope {
	out := make([]herald.Envelope, len(rows))
	for i, row := range rows {
		out[i] = row.Envelope
	}
	return out
}
