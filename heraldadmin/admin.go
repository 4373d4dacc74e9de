// Package heraldadmin is what operators and their tools see of an outbox:
// how many events wait on each topic and how old the oldest is, which
// events are dead and why, which keys a dead event parks, and the two ways
// out of the dead letters (requeue, discard). The herald CLI, the admin
// page and heraldprom's backlog metrics are built on it.
//
// Every store driver implements Admin next to herald.Store: heraldpg.New
// and heraldsqlite.New return a value that is both. The relay itself never
// needs this package.
package heraldadmin

import (
	"context"
	"time"

	"github.com/herald-outbox/herald"
)

// Admin is what operator tools need from a store, beyond the relay's
// herald.Store. Like Store it is implemented by the driver packages.
type Admin interface {
	// Status counts every row by topic and state.
	Status(ctx context.Context) (Status, error)
	// ListEvents returns up to f.Limit rows matched by f, in write order.
	ListEvents(ctx context.Context, f EventFilter) ([]EventRow, error)
	// GetEvent returns one row, in any state; an error wrapping
	// ErrNotFound when there is none with that id.
	GetEvent(ctx context.Context, id string) (EventRow, error)
	// RequeueDead makes the dead rows matched by f ready again, with their
	// attempt counts reset; it returns how many rows changed.
	RequeueDead(ctx context.Context, f EventFilter) (int, error)
	// DiscardDead deletes the dead rows matched by f and returns how many.
	// A dead row that parks its key with ready events waiting behind it is
	// deleted only with f.Resume; without it DiscardDead deletes nothing
	// and returns a *ParkedError. A parked key with nothing waiting needs
	// no Resume: discarding its dead event and letting it go on are then
	// the same thing.
	DiscardDead(ctx context.Context, f EventFilter) (int, error)
	// BlockedKeys lists up to limit keys parked by a dead event, oldest
	// first.
	BlockedKeys(ctx context.Context, limit int) ([]BlockedKey, error)
	// Backlog summarises, per topic, the rows that wait (ready, claimed)
	// and the dead ones. It reads those rows only, through their partial
	// indexes, never the published ones: cheap enough for metrics.
	Backlog(ctx context.Context) ([]TopicBacklog, error)
	// Pause holds p.Kind p.Name: every relay stops claiming its events
	// within herald.PauseRefresh, and they wait, ready and untouched,
	// until Resume. Pausing what is paused already keeps its start and
	// takes the new reason.
	Pause(ctx context.Context, p PauseParams) error
	// Resume ends the pause of kind name; its events are claimed again,
	// in order. It reports false when no such pause was in force.
	Resume(ctx context.Context, kind herald.PauseKind, name string) (bool, error)
	// Pauses returns every pause, in force or resumed (herald.Store's).
	Pauses(ctx context.Context) ([]herald.Pause, error)
}

// PauseParams are the arguments of Admin.Pause.
type PauseParams struct {
	Kind   herald.PauseKind // herald.PauseTopic or herald.PauseDestination
	Name   string           // the topic or the destination, as routes name it
	Reason string           // shown to other operators; at most MaxPauseText bytes
	By     string           // who pauses; at most MaxPauseText bytes
}

// MaxPauseText bounds a pause's name, reason and author, in bytes.
const MaxPauseText = 1024

// State is an outbox row's place in its life.
type State string

// The states of an outbox row.
const (
	StateReady     State = "ready"
	StateClaimed   State = "claimed"
	StatePublished State = "published"
	StateDead      State = "dead"
	// StateStreamed is a row inserted while a change-data-capture relay
	// reads the table's inserts from the database's log (herald relay
	// --source cdc, PostgreSQL only): no claim takes it; the relay
	// publishes it from the log and writes it back as ready or dead only
	// if it fails. Status counts these rows on their own; retention
	// deletes them by age. They are not pending: Status's OldestPending
	// and Backlog leave them out.
	StateStreamed State = "streamed"
)

// EventFilter selects rows for the operator tools. Exactly one of IDs, Topic
// or All must be set; State narrows the selection.
type EventFilter struct {
	IDs   []string
	Topic string
	All   bool
	State State // defaults to StateDead
	Limit int   // for listings; defaults to 100
	// Resume lets DiscardDead delete dead events that park their key with
	// events waiting, so that the key's waiting events go on.
	Resume bool
}

// EventRow is a whole outbox row, for operators.
type EventRow struct {
	herald.Envelope
	State       State
	AvailableAt time.Time
	LeaseUntil  *time.Time
	ClaimedBy   string
	PublishedAt *time.Time
	DeadAt      *time.Time
	LastError   string
	Parked      bool // a dead event that holds back the later events of its key
}

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
