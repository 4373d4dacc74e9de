package herald

import (
	"context"
	"errors"
	"strings"
	"unicode/utf8"
)

// Source is a change-data-capture source of committed events: instead of
// claiming rows from the outbox table, the relay reads them, in commit
// order, from the database's log (driver/heraldcdc for PostgreSQL). Set
// it as RelayConfig.Source; the relay then publishes the source's events
// through the same publisher, per-key rules, retry policy and dead
// letters as claimed ones, and keeps claiming from the table what the
// stream hands back to it: events that failed, the later events of their
// key, and rows written for polling.
//
// A source's events are never written to the table when they are
// published: the relay tells the source, by the batch's Done, that every
// event of the batch was either confirmed by the broker or written back
// to the table (StreamStore.Return), and only then may the source
// confirm their position to the database. A crash redelivers at most the
// batches not yet done.
//
// A Source holds its position in the log from the moment it is made
// (heraldcdc.NewSource returns only once its replication slot exists):
// the relay relies on it when it makes the table's inserts streamed as it
// starts (StreamSwitch), so that every row inserted as streamed is read.
type Source interface {
	// Next waits for committed events and returns between one and limit
	// of them, in commit order. The relay calls it again only after the
	// previous batch's Done, so a source that reconnects may restart from
	// its confirmed position at any call. Its error, other than ctx's, is
	// logged and Next is called again after a pause.
	Next(ctx context.Context, limit int) (SourceBatch, error)
}

// SourceBatch is a run of a Source's events.
type SourceBatch struct {
	// Events are in commit order. Attempt is 1 and CreatedAt is the row's;
	// the relay sets Ordered.
	Events []Envelope
	// Unreadable are rows the source could not read as events (a header
	// value that is not a string, ...), each decided as OutcomeDead with
	// why: the relay writes them down with StreamStore.Return.
	Unreadable []Failure
	// Done tells the source that every event of the batch was published
	// or written back to the table: their position may be confirmed. The
	// relay calls it once, never for a batch it gave up (the relay is
	// stopping and could not write the failures down): those events come
	// again.
	Done func()
	// Abandon, when set, tells the source that the relay gives the batch
	// up unsettled because the database stopped answering: the source
	// drops its connection to the log and hands the batch out again once
	// it reconnects. PostgreSQL's shutdown waits for its log readers to
	// confirm what they were sent, so a reader that held on while the
	// relay cannot write to the table would keep the database from
	// stopping. The relay calls Next again after it. It is called at most
	// once, and never with Done. Without it, the relay waits for the
	// database as long as it takes.
	Abandon func()
}

// StreamStore is what a Store implements so that a relay with a Source
// can hand events back to the table (driver/heraldpg implements it).
type StreamStore interface {
	// KeysWaiting returns those of keys that have rows in the table a
	// claim delivers before any later event of the key: ready, claimed
	// or parked. A streamed event of such a key is written back behind
	// them instead of being published, so that the key keeps its order.
	KeysWaiting(ctx context.Context, keys []TopicKey) ([]TopicKey, error)
	// Return writes streamed events back to the table, each as its
	// Failure says (never OutcomePublished): ready after Delay with the
	// envelope's attempt spent (OutcomeRetry) or refunded (when
	// Outcome.Refunded), or dead, parking its key for OutcomeParked;
	// last_error takes Failure.Error unless Outcome.KeepsLastError. The
	// row is written with the envelope's id, seq and created_at, so an
	// event keeps its place in its key even when its row was deleted
	// meanwhile (retention) or never kept. A row that is no longer
	// streamed (returned already by an earlier run, or changed by an
	// operator) is left as it is. A Failure whose ID is not among
	// p.Events (an unreadable row) changes only a streamed row of that
	// id. It returns how many rows it wrote.
	Return(ctx context.Context, p ReturnParams) (int, error)
}

// StreamSwitch is what a Store implements when its table's inserts can
// start in the streamed state: rows that no claim takes, which only a
// relay with a Source delivers (driver/heraldpg). The relay keeps the two
// paths apart with it as it starts, so that no embedding service has to:
//   - a relay with a Source makes the table's inserts streamed, after its
//     Source took its position in the log, never before: a row inserted
//     as streamed with nothing reading the log would be delivered by
//     neither path;
//   - a relay without one refuses a table whose inserts are streamed: it
//     would claim none of the new events while looking healthy.
type StreamSwitch interface {
	// Table names the outbox table, for errors.
	Table() string
	// StreamInserts makes rows inserted without a state start streamed
	// (on) or ready (off), for every producer. It does nothing when they
	// do already.
	StreamInserts(ctx context.Context, on bool) error
	// InsertsStreamed reports whether rows inserted without a state start
	// streamed.
	InsertsStreamed(ctx context.Context) (bool, error)
}

// TopicKey names one ordered key.
type TopicKey struct{ Topic, Key string }

// ReturnParams are the arguments of StreamStore.Return.
type ReturnParams struct {
	Events []Envelope // the streamed events that were not published
	Failed []Failure  // their outcomes, by ID, and unreadable rows'
}

// UnreadableHeader starts the name of the header MarkUnreadable adds to
// an event a Store's claim or a Source could not read whole, followed by
// what could not be read ("row: column headers: ..."). The relay refuses
// such an event as it refuses a row that breaks WriteTx's rules: it is
// dead, its ordered key parked, with the header's name as its last error
// ("herald: unreadable row: ..."), and it is logged and counted with every
// other dead event. The name is no valid header name (it holds spaces), so
// the event stays refused wherever it goes next: written back to the table
// and requeued, it is refused again.
const UnreadableHeader = "herald: unreadable "

// MarkUnreadable marks an event that a Store's claim or a Source could not
// read whole (a header that is a number, a created_at at infinity), so
// that the relay refuses it rather than publish it without what is
// missing; see UnreadableHeader. why says what could not be read, starting
// with what was being read ("row: header \"n\" is a number"); it is
// scrubbed of secrets and cut to MaxHeaderNameLen with the prefix.
func MarkUnreadable(env *Envelope, why string) {
	name := UnreadableHeader + Scrub(why)
	if len(name) > MaxHeaderNameLen {
		n := MaxHeaderNameLen
		for n > 0 && !utf8.RuneStart(name[n]) {
			n--
		}
		name = name[:n]
	}
	if env.Headers == nil {
		env.Headers = map[string]string{}
	}
	env.Headers[name] = ""
}

// unreadable returns, for an event a Source marked with UnreadableHeader,
// why it cannot be published, as an error IsPermanent reports and whose
// text is the marker's name alone.
func unreadable(m *Message) error {
	for name := range m.Headers {
		if strings.HasPrefix(name, UnreadableHeader) {
			return unreadableError{name}
		}
	}
	return nil
}

// unreadableError is permanent, but its text is the reason without the
// "permanent: " that Permanent's adds, as the claims' unreadable rows say.
type unreadableError struct{ why string }

func (e unreadableError) Error() string { return e.why }
func (e unreadableError) Unwrap() error { return Permanent(errors.New(e.why)) }
