package heraldadmin

import (
	"context"
	"time"
)

// Retrying is what an operator reads of the events that failed and wait
// for their next attempt, and the one thing done to them that never
// reorders a key: trying them now. Drivers implement it next to Admin;
// tools find it by type assertion.
//
// A retrying event is a ready event with a last error that either spent
// an attempt (attempts > 0) or waits out a destination's outage, whose
// attempt is refunded (available_at in the future). Every read goes
// through the ready rows' partial indexes, never the published rows.
type Retrying interface {
	// RetryGroups groups the retrying events by their exact last error,
	// the largest group first, at most limit groups.
	RetryGroups(ctx context.Context, limit int) ([]RetryGroup, error)
	// ListRetrying returns up to f.Limit retrying events matched by f,
	// the next attempt first.
	ListRetrying(ctx context.Context, f RetryFilter) ([]EventRow, error)
	// RetryNow makes the retrying events matched by f that wait for a
	// later attempt available now, and returns how many. It never
	// reorders a key: the later events of a key wait behind its first
	// ready event whenever that one is tried.
	RetryNow(ctx context.Context, f RetryFilter) (int, error)
}

// RetryGroup is the retrying events that share a last error.
type RetryGroup struct {
	LastError   string
	Count       int64
	Topics      int64     // how many topics the events are of
	MaxAttempts int       // the most attempts any of them spent
	NextAttempt time.Time // the earliest available_at of the group
	Oldest      time.Time // the earliest created_at of the group
}

// RetryFilter selects retrying events. Every field that is set narrows
// the selection; RetryNow refuses the zero filter unless All is set.
type RetryFilter struct {
	IDs       []string
	Topic     string
	LastError string // the exact last error, as a RetryGroup has it
	All       bool
	// Limit bounds ListRetrying; defaults to 100, at most MaxListLimit.
	Limit int
}

// Narrowed reports whether f selects by ids, topic or last error.
func (f RetryFilter) Narrowed() bool { return len(f.IDs) > 0 || f.Topic != "" || f.LastError != "" }
