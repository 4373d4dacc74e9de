package herald

import (
	"context"
	"fmt"
	"time"
)

// Store is the seam between the relay and a database driver. It is
// implemented by the driver packages (driver/heraldpg) and is not a stable
// API: methods may be added as the relay grows. Every method that changes a
// claimed row checks the claim token, so a relay that lost its lease (paused,
// cut off, past its lease) changes nothing.
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
	// p.Published become published, each of p.Failed gets its Outcome
	// (ready again after its Delay, attempt refunded or not; dead, parking
	// its key or not). It changes only rows still claimed by p.Token, in
	// one statement, and says which rows it changed. The relay decides;
	// the store applies no policy of its own.
	Complete(ctx context.Context, p CompleteParams) (CompleteResult, error)
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
}

// CompleteParams are the arguments of Store.Complete.
type CompleteParams struct {
	Token     string
	Published []string  // ids the broker confirmed
	Failed    []Failure // every other event of the batch, with its outcome
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
	Published int      // rows marked published
	Failed    []string // ids of p.Failed whose rows were changed
}

// Admin is what operator tools need from a store, beyond the relay's Store.
type Admin interface {
	Status(ctx context.Context) (Status, error)
	ListEvents(ctx context.Context, f EventFilter) ([]EventRow, error)
	GetEvent(ctx context.Context, id string) (EventRow, error)
	// RequeueDead makes the dead rows matched by f ready again, with their
	// attempt counts reset; it returns how many rows changed.
	RequeueDead(ctx context.Context, f EventFilter) (int, error)
	// DiscardDead deletes the dead rows matched by f and returns how many.
	// A dead row that parks its key is deleted only with f.Resume; without
	// it DiscardDead deletes nothing and returns a *ParkedError.
	DiscardDead(ctx context.Context, f EventFilter) (int, error)
	// BlockedKeys lists up to limit keys parked by a dead event, oldest
	// first.
	BlockedKeys(ctx context.Context, limit int) ([]BlockedKey, error)
	// Backlog summarises, per topic, the rows that wait (ready, claimed)
	// and the dead ones. It reads those rows only, through their partial
	// indexes, never the published ones: cheap enough for metrics.
	Backlog(ctx context.Context) ([]TopicBacklog, error)
}

// TopicBacklog is what waits on one topic.
type TopicBacklog struct {
	Topic         string
	Ready         int64
	Claimed       int64
	Dead          int64
	ParkedKeys    int64         // dead events that park their key
	OldestPending time.Duration // age of the oldest ready or claimed row; 0 when none
}

// BlockedKey is a key whose events wait behind a dead event.
type BlockedKey struct {
	Topic   string
	Key     string
	EventID string    // the dead event that parks the key
	Waiting int64     // ready events of the key waiting behind it
	Since   time.Time // when the event went dead
}

// ParkedError is returned by DiscardDead when the selection holds dead
// events that park their key and Resume was not set: discarding them lets
// the events waiting behind them go on, which the operator must ask for.
type ParkedError struct {
	Keys []BlockedKey
}

func (e *ParkedError) Error() string {
	k := e.Keys[0]
	more := ""
	if len(e.Keys) > 1 {
		more = fmt.Sprintf(" (and %d more keys)", len(e.Keys)-1)
	}
	return fmt.Sprintf("herald: dead event %s parks key %q of topic %q with %d events waiting%s; "+
		"discarding it lets them go on: ask for that explicitly (resume)", k.EventID, k.Key, k.Topic, k.Waiting, more)
}

// State is an outbox row's place in its life.
type State string

// The states of an outbox row.
const (
	StateReady     State = "ready"
	StateClaimed   State = "claimed"
	StatePublished State = "published"
	StateDead      State = "dead"
)

// Status summarises an outbox table.
type Status struct {
	// Topics has one entry per topic and state present in the table.
	Topics []TopicStatus
	// OldestPending is the age of the oldest ready or claimed row, zero when
	// there is none.
	OldestPending time.Duration
}

// TopicStatus counts the rows of one topic in one state.
type TopicStatus struct {
	Topic  string
	State  State
	Count  int64
	Oldest time.Duration // age of the oldest row in this state
}

// EventFilter selects rows for the operator tools. Exactly one of IDs, Topic
// or All must be set; State narrows the selection.
type EventFilter struct {
	IDs   []string
	Topic string
	All   bool
	State State // defaults to StateDead
	Limit int   // for listings; defaults to 100
	// Resume lets DiscardDead delete dead events that park their key, so
	// that the key's waiting events go on.
	Resume bool
}

// EventRow is a whole outbox row, for operators.
type EventRow struct {
	Envelope
	State       State
	AvailableAt time.Time
	LeaseUntil  *time.Time
	ClaimedBy   string
	PublishedAt *time.Time
	DeadAt      *time.Time
	LastError   string
	Parked      bool // a dead event that holds back the later events of its key
}
