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
	// events of p.UnorderedTopics, are claimed as if p.Unordered. Events of
	// p.PausedTopics are not claimed at all.
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
	// Pauses returns every pause an operator set (heraldadmin.Admin's
	// Pause), in force or resumed, ordered by kind and name. The relay
	// reads it at most once a second.
	Pauses(ctx context.Context) ([]Pause, error)
	// ReadyTopics returns the topics that have ready events, in order,
	// one index probe per topic. The relay reads it only while a
	// destination is paused, to know which topics route there.
	ReadyTopics(ctx context.Context) ([]string, error)
}

// Heartbeats is what a Store implements to record the relays running on
// its table, so that operators see every one of them from any relay's admin
// page and from herald status (heraldadmin.Relays lists them). It is
// optional: the relay of a Store without it runs unlisted. A relay beats
// when it starts and every RelayConfig.HeartbeatInterval, and calls Gone
// when it stops; a failing beat never stops it from relaying.
type Heartbeats interface {
	// Beat writes b as its relay's row, with the times b gives as
	// durations turned into times by the database clock, and deletes the
	// rows of other relays that have expired (whose relay died without
	// Gone). A row's first beat, or a beat with b.First, sets its start;
	// later beats keep it.
	Beat(ctx context.Context, b RelayBeat) error
	// Gone deletes owner's row: its relay stopped.
	Gone(ctx context.Context, owner string) error
}

// RelayBeat is one heartbeat of a relay. Its times travel as durations
// measured by the relay, which the store subtracts from, or adds to, the
// database's now: every relay's row then reads on the database's clock,
// whatever the clocks of the relays' hosts.
type RelayBeat struct {
	Owner   string // RelayConfig.Owner: host/pid by default
	Version string // the Herald module version the relay runs
	// First is the relay's first beat: it replaces a row left under the
	// same owner by an earlier relay (the same host and pid after a
	// container restart), start included.
	First bool
	// Running is how long the relay has run: its row's start is the
	// database's now minus Running.
	Running time.Duration
	// SinceClaim is how long ago the relay's last claim that took events
	// was; negative before its first.
	SinceClaim time.Duration
	Leased     int64 // claimed rows the relay holds now (Relay.InFlight)
	Published  int64 // events it published since it started
	// Expiry is how long the row stays listed without another beat: past
	// it the relay is taken for dead, and the next beat of any relay on
	// the table deletes its row.
	Expiry time.Duration
}

// PauseKind is what a pause holds: a topic, or a destination of the
// herald daemon (every topic routed to it).
type PauseKind string

// The kinds of pause.
const (
	PauseTopic       PauseKind = "topic"
	PauseDestination PauseKind = "destination"
)

// Pause is an operator's pause of a topic or a destination, stored in the
// outbox's database so that every relay honours it. While it is in force
// no relay claims the events it holds: they stay ready, untouched, and
// spend no attempt; an ordered key is in one topic, so its order is kept.
// A resumed pause is kept, not in force, for the time it ended (Resumed),
// which RetryPolicy.MaxAge counts from.
type Pause struct {
	Kind    PauseKind
	Name    string    // the topic or the destination
	Paused  bool      // in force
	Reason  string    // what the operator said, for other operators
	By      string    // who paused: the CLI's user and host, the admin page's client
	Since   time.Time // when it was paused
	Resumed time.Time // when it was last resumed; zero while in force or never
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

	// PausedTopics are topics whose events the claim leaves alone: no
	// event of theirs is claimed, ordered or not. A claim with paused
	// topics reaches the others by the key walk of an ordered claim, even
	// when Unordered (their events are then taken as if of
	// UnorderedTopics): the walk passes a paused topic in one index
	// probe, where the claim by age would read every paused event.
	PausedTopics []string

	// MaxBytes bounds the batch's payload and header bytes, as the
	// database counts them: rows are taken in claim order while the bytes
	// of those before them are under it, so the first row is always
	// taken. 0 means no bound.
	MaxBytes int64

	// SkipBacklogged is a claim of the relay's fair lane (FairClaims): it
	// takes events only of the fairness values that are not backlogged,
	// those whose ready events all fitted in their share of the store's
	// latest full claims, and nothing while none is backlogged. A store
	// without fair claims never sees it set.
	SkipBacklogged bool
}

// FairClaims is what a Store implements whose claims are fair between the
// values of a key (heraldpg's Config.FairBy). A fair claim gives a value
// with a trickle of events its share of the batch, but while a backlogged
// value keeps every publish slot busy with full batches, the next claim,
// and so the trickle's events, wait for a slot. So the relay of a Store
// whose ClaimsFair reports true runs one more claim loop beside its
// MaxInFlight slots, the fair lane: small claims with
// ClaimParams.SkipBacklogged, which take the events of the values that
// have no backlog as soon as they are committed. Its claims take keys as
// every other claim does, so each key keeps its order.
type FairClaims interface {
	ClaimsFair() bool
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

// Outcome is what becomes of a claimed event once its publish attempt is
// over. The relay decides it for every event of a batch in one place
// (decide); the store only writes it down.
type Outcome string

// The outcomes of a claimed event.
const (
	// OutcomePublished: the broker confirmed the event.
	OutcomePublished Outcome = "published"
	// OutcomeRetry: rescheduled with backoff; the attempt counts.
	OutcomeRetry Outcome = "retry"
	// OutcomeOutage: its destination was unreachable; retried after a
	// pause without spending the attempt.
	OutcomeOutage Outcome = "outage"
	// OutcomeHeldBack: not sent, behind an earlier failed event of its
	// key; ready again at once, attempt refunded.
	OutcomeHeldBack Outcome = "held_back"
	// OutcomeReleased: the relay stopped before the broker confirmed the
	// event; ready again at once, attempt refunded.
	OutcomeReleased Outcome = "released"
	// OutcomeDead: made dead (permanent, out of attempts or too old).
	OutcomeDead Outcome = "dead"
	// OutcomeParked: made dead, and its key parked behind it until an
	// operator requeues or discards it.
	OutcomeParked Outcome = "parked"
)

// Dead reports whether the outcome makes the row dead.
func (o Outcome) Dead() bool { return o == OutcomeDead || o == OutcomeParked }

// Refunded reports whether the claim's attempt is given back: the event
// was not really tried (an outage, held back, released on shutdown).
func (o Outcome) Refunded() bool {
	return o == OutcomeOutage || o == OutcomeHeldBack || o == OutcomeReleased
}

// KeepsLastError reports whether the row keeps its last_error: the event
// did not fail itself (published, held back, released).
func (o Outcome) KeepsLastError() bool {
	return o == OutcomePublished || o == OutcomeHeldBack || o == OutcomeReleased
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
