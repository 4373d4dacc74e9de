package heraldinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/herald-outbox/herald"
)

// ErrStale is what AdvancePgx and AdvanceSQL refuse an event with when
// its aggregate version is not above the last one the consumer handled
// for the aggregate: a stale event, or one replayed out of order. Test for
// it with errors.Is; the error is a *StaleError.
var ErrStale = errors.New("heraldinbox: stale aggregate version")

// StaleError is the refusal of an event whose aggregate version is not
// newer than the last one handled. errors.Is(err, ErrStale) is true.
type StaleError struct {
	Consumer  string
	Aggregate Aggregate // the refused event's aggregate and version
	Last      int64     // the last version the consumer handled
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("heraldinbox: consumer %.64q handled version %d of aggregate %.64q %.64q; version %d is not newer",
		e.Consumer, e.Last, e.Aggregate.Type, e.Aggregate.ID, e.Aggregate.Version)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Aggregate is the business object an event changes and the version the
// event brings it to: herald.Message's AggregateType, AggregateID and
// AggregateVersion, which every publisher carries (the Herald-Aggregate-*
// headers) and every Parse helper returns.
type Aggregate struct {
	Type string
	ID   string
	// Version is the aggregate's version after the event. Zero means the
	// event has none: it is not checked and nothing is recorded.
	Version int64
}

// AggregateOf returns m's aggregate and version.
func AggregateOf(m herald.Message) Aggregate {
	return Aggregate{Type: m.AggregateType, ID: m.AggregateID, Version: m.AggregateVersion}
}

// check refuses what cannot be recorded. An empty type is allowed (an
// event may name only an id); an empty id is not, for a version of nothing
// would refuse the events of every other aggregate without an id.
func (a Aggregate) check(consumer string) error {
	if err := checkText("consumer", consumer, MaxKeyLen); err != nil {
		return err
	}
	if a.Version < 0 {
		return fmt.Errorf("heraldinbox: aggregate version %d is negative", a.Version)
	}
	if a.ID == "" {
		return errors.New("heraldinbox: an aggregate version without an aggregate id")
	}
	for _, f := range [...]struct{ name, v string }{{"aggregate type", a.Type}, {"aggregate id", a.ID}} {
		if f.v == "" {
			continue
		}
		if err := checkText(f.name, f.v, herald.MaxTextFieldLen); err != nil {
			return err
		}
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("heraldinbox: %s is not valid UTF-8", f.name)
		}
	}
	return nil
}

// AdvancePgx records a.Version as the last version of the aggregate that
// consumer handled, in tx, the handler's transaction; it returns a
// *StaleError (errors.Is ErrStale), and records nothing, when the consumer
// already handled this version or a later one. Call it in the handler
// given to ProcessPgx, before the side effects, and return its error:
//
//   - the version and the effects commit together, or neither does: a
//     handler that fails after it leaves the recorded version as it was;
//   - a stale event rolls back with the inbox record, so ProcessPgx
//     returns the *StaleError on each delivery of it: acknowledge it to the
//     broker, do not retry it;
//   - two transactions advancing one aggregate at the same moment meet at
//     its row: the second waits for the first to end, then compares with
//     what it committed (on PostgreSQL at READ COMMITTED, the default; at
//     REPEATABLE READ or SERIALIZABLE the second fails with a serialization
//     error instead, to be retried).
//
// An event without a version (a.Version 0) passes: AdvancePgx returns nil
// and records nothing, so an aggregate's versioned and unversioned events
// can be handled side by side.
func (ib *Inbox) AdvancePgx(ctx context.Context, tx pgx.Tx, consumer string, a Aggregate) error {
	if err := ib.pgxOnly("AdvancePgx"); err != nil {
		return err
	}
	if a.Version == 0 {
		return nil
	}
	if err := a.check(consumer); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, ib.d.advance, ib.d.advanceArgs(consumer, a)...)
	if err != nil {
		return fmt.Errorf("heraldinbox: recording version %d of %.64q: %w", a.Version, a.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	stale := &StaleError{Consumer: consumer, Aggregate: a}
	if err := tx.QueryRow(ctx, ib.d.last, keyArgs(consumer, a)...).Scan(&stale.Last); err != nil {
		return fmt.Errorf("heraldinbox: reading the version of %.64q: %w", a.ID, err)
	}
	return stale
}

// AdvanceSQL is AdvancePgx for database/sql: PostgreSQL through pgx's
// stdlib, SQLite (which runs one writer at a time: a racing transaction
// waits for the database's lock), MySQL or MariaDB (at READ COMMITTED or
// REPEATABLE READ; the racing transaction waits for the aggregate's row).
// Call it in the handler given to ProcessSQL, with its *sql.Tx.
func (ib *Inbox) AdvanceSQL(ctx context.Context, tx *sql.Tx, consumer string, a Aggregate) error {
	if a.Version == 0 {
		return nil
	}
	if err := a.check(consumer); err != nil {
		return err
	}
	// On MySQL, the row is made first, at version 0 if new, by an upsert
	// that takes its exclusive lock either way; the UPDATE then raises the
	// version only if it is lower. Two transactions on one new aggregate:
	// the second's upsert waits for the first's uncommitted row, and its
	// UPDATE, a locking read, compares with the version the first
	// committed (or finds 0 if it rolled back). One INSERT ... ON DUPLICATE
	// KEY UPDATE alone would not say which happened: its count of affected
	// rows for an unchanged row depends on the connection's
	// clientFoundRows. The UPDATE's count does not: its WHERE matches only
	// a row it changes.
	if ib.d.ensure != "" {
		if _, err := tx.ExecContext(ctx, ib.d.ensure, keyArgs(consumer, a)...); err != nil {
			return fmt.Errorf("heraldinbox: recording version %d of %.64q: %w", a.Version, a.ID, err)
		}
	}
	res, err := tx.ExecContext(ctx, ib.d.advance, ib.d.advanceArgs(consumer, a)...)
	if err != nil {
		return fmt.Errorf("heraldinbox: recording version %d of %.64q: %w", a.Version, a.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("heraldinbox: recording version %d of %.64q: %w", a.Version, a.ID, err)
	}
	if n == 1 {
		return nil
	}
	stale := &StaleError{Consumer: consumer, Aggregate: a}
	if err := tx.QueryRowContext(ctx, ib.d.last, keyArgs(consumer, a)...).Scan(&stale.Last); err != nil {
		return fmt.Errorf("heraldinbox: reading the version of %.64q: %w", a.ID, err)
	}
	return stale
}
