package herald

import (
	"context"
	"time"
)

// Store is the seam between the relay and a database driver. It is
// implemented by the driver packages (driver/heraldpg, driver/heraldsqlite)
// and is not a stable API: methods may be added as the relay grows. Every
// method that changes a claimed row checks the claim token, so a relay that
// lost its lease (paused, cut off, past its lease) changes nothing.
//
// What operators need of the same table (counts, dead events, parked keys)
// is heraldadmin.Admin, which the drivers implement too.
type Store interface {
	// Migrate brings the schema up to date. Safe to run from several
	// processes at once.
	Migrate(ctx context.Context) error
	// Claim marks up to p.Limit ready rows (available_at reached) as claimed
	// by p.Token, with a lease of p.Lease from the database clock, in one
	// short transaction that skips rows other claimers hold. The attempt
	// count of each returned envelope includes this claim. Envelopes come
	// in sequence order.
	//
	// Unless p.Unordered, a claim is ordered: it takes a key's events only
	// when no event of that key is claimed (by anyone) or parked, starting
	// at the key's lowest ready sequence number and stopping before the
	// first one not yet available, at most p.PerKey of them. Two claimers
	// never hold events of one key at once. Events with an empty key, and
	// events of p.UnorderedTopics, are claimed as if p.Unordered.
	Claim(ctx context.Context, p ClaimParams) ([]Envelope, error)
	// Complete writes down what the relay decided for a claimed batch:
	// the rows of p.Published become published, or are deleted when
	// p.Delete; each row of p.Failed
	// becomes what its Failure.Outcome says: ready again after its Delay
	// (its attempt given back when Outcome.Refunded), or dead, parking its
	// key for OutcomeParked. last_error takes Failure.Error unless
	// Outcome.KeepsLastError. It changes only rows still claimed by
	// p.Token, in one statement, and reports them in CompleteResult. The
	// relay decides; the store applies no policy of its own.
	Complete(ctx context.Context, p CompleteParams) (CompleteResult, error)
	// ReleaseClaim returns every row still claimed by token to ready at
	// once, its attempt refunded, and says how many. The relay calls it
	// for a claim whose answer it never got (a dropped connection, a
	// timeout): the claim may have committed, and its rows would otherwise
	// wait for their lease.
	ReleaseClaim(ctx context.Context, token string) (int, error)
	// RescueExpired returns up to limit rows whose lease expired to ready.
	RescueExpired(ctx context.Context, limit int) (int, error)
	// DeletePublished deletes up to limit rows published more than
	// olderThan ago, by the database clock.
	DeletePublished(ctx context.Context, olderThan time.Duration, limit int) (int, error)
	// Ping checks the database is reachable.
	Ping(ctx context.Context) error
}

// ClaimParams are the arguments of Store.Claim.
type ClaimParams struct {
	Token string        // a fresh UUID per claim
	Owner string        // who claims, for operators: host and pid
	Limit int           // most rows to claim
	Lease time.Duration // lease length, added to the database clock

	Unordered       bool     // claim by age alone, with no key held back
	UnorderedTopics []string // topics claimed by age even in an ordered claim
	PerKey          int      // most events of one key in an ordered claim; 0 means Limit

	// MaxBytes bounds the batch's payload and header bytes, as the
	// database counts them: rows are taken in claim order while the bytes
	// of those before them are under it, so the first row is always
	// taken. 0 means no bound.
	MaxBytes int64
}

// CompleteParams are the arguments of Store.Complete.
type CompleteParams struct {
	Token     string
	Published []string  // ids the broker confirmed
	Failed    []Failure // every other event of the batch, with its outcome

	// Delete removes the rows of Published instead of keeping them as
	// published (RelayConfig.DeleteOnPublish): no new row version, no
	// index entry, and nothing left for retention to delete.
	Delete bool
}

// Failure is the decided outcome of one event that was not published.
type Failure struct {
	ID      string
	Outcome Outcome       // never OutcomePublished
	Error   string        // scrubbed of secrets; kept as last_error unless Outcome.KeepsLastError
	Delay   time.Duration // until the next attempt, for outcomes that leave the row ready
}

// CompleteResult says what Complete changed.
type CompleteResult struct {
	Published int      // rows marked published, or deleted for CompleteParams.Delete
	Failed    []string // ids of p.Failed whose rows were changed
}
