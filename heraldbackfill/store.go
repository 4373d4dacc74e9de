package heraldbackfill

import (
	"context"
	"time"

	"github.com/herald-outbox/herald"
)

// Store is what a driver implements for backfills: driver/heraldpg's
// Driver does. Like herald.Store it is a seam between Herald's packages,
// not a stable API. A driver without it cannot run a backfill (New says
// so).
type Store interface {
	// BackfillStart records a backfill named p.Name over p.Source, or
	// finds the record of an earlier run: its progress, which the next
	// batch continues from. A record of that name over another source is
	// refused (ErrSourceChanged), so that a resumed backfill never mixes
	// two definitions.
	BackfillStart(ctx context.Context, p StartParams) (Progress, error)
	// BackfillBatch writes the events of the next rows of the source
	// after the recorded last key, at most p.Limit of them in key order,
	// and records the new last key, in one transaction: a crash keeps the
	// whole batch or none of it.
	BackfillBatch(ctx context.Context, p BatchParams) (BatchResult, error)
	// BackfillCount counts the rows of the source after the recorded last
	// key, or all of them with p.FromStart, and returns the record (the
	// zero Progress when there is none); it writes nothing (the dry run,
	// and the progress bar's total).
	BackfillCount(ctx context.Context, p StartParams) (Progress, int64, error)
	// BackfillReset forgets a backfill's record, so that it starts over.
	BackfillReset(ctx context.Context, name string) error
	// ReadyBacklog counts the outbox's ready events, up to limit: a count
	// bounded by its index, cheap whatever the backlog.
	ReadyBacklog(ctx context.Context, limit int) (int, error)
}

// StartParams names a backfill and its source.
type StartParams struct {
	Name   string
	Source Source
	// Fingerprint is what the record keeps of the definition
	// (Source.Fingerprint), compared on every resume.
	Fingerprint string
	// FromStart counts every row, whatever the record (BackfillCount).
	FromStart bool
}

// Progress is a backfill's record.
type Progress struct {
	// LastKey is the key of the last row whose event committed, each key
	// column as text; nil before the first batch.
	LastKey []string
	// Rows counts the rows backfilled so far, over every run.
	Rows int64
	// Done says the last batch found the end of the source.
	Done bool
	// StartedAt is when the first run began.
	StartedAt time.Time
}

// Row is one row of a backfill's source, for Config.Map.
type Row struct {
	// Values is the row as a JSON object decoded (to_jsonb of the row):
	// each column by name, numbers as json.Number; set only for a
	// Config.Map.
	Values map[string]any
	// Key is the key expression's value (Source.Key) and Payload the
	// payload expression's (Source.Payload).
	Key     string
	Payload []byte
}

// BatchParams is one batch's work.
type BatchParams struct {
	Name   string
	Source Source
	Limit  int
	// Messages turns the batch's rows into their events, one per row in
	// the order given (key order); the store adds the HeaderBackfill
	// header and writes them.
	Messages func(rows []Row) ([]herald.Message, error)
	// WantValues says Messages reads Row.Values (a Config.Map); without it the store reads the key, the payload and
	// the key columns only.
	WantValues bool
	// MaxPayloadBytes caps an event's payload, as the Writer's does.
	MaxPayloadBytes int
	// Waiting, when set, is called while the batch waits for
	// transactions that hold the outbox table (the ordering barrier, see
	// the package doc), with how many and for how long.
	Waiting func(holders int, waited time.Duration)
}

// BatchResult is what a batch did.
type BatchResult struct {
	// Rows is the number of rows read and events written.
	Rows int
	// Progress is the record after the batch.
	Progress Progress
}
