// Package heralddrivertest is the conformance suite every Herald store
// driver must pass: what "correct" means for a store, checked the same way
// against each database. A driver's test calls Exercise with a Harness.
//
// A driver that cannot support a case declares it in Harness.Skip with the
// reason; the case then skips with that reason instead of failing.
package heralddrivertest

import (
	"context"
	"testing"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Harness builds drivers for the suite.
type Harness struct {
	// Name labels the driver in test names, such as "pgx" or "sqlite".
	Name string
	// New returns a fresh, migrated, empty outbox for one test, cleaned up
	// with t.Cleanup. Tests run in parallel: each call must be isolated.
	New func(t *testing.T) *Driver
	// Skip names suite cases this driver cannot support, with the reason.
	Skip map[string]string
}

// Driver is one outbox under test.
type Driver struct {
	Store herald.Store
	Admin heraldadmin.Admin
	// Write writes msgs with the driver's writer in one transaction of the
	// driver's database, then commits it, or rolls it back when commit is
	// false. It returns WriteTx's error unchanged, after rolling back: a
	// refused write leaves nothing behind.
	Write func(ctx context.Context, msgs []herald.Message, commit bool) error
	// Backdate moves a row's created_at and published_at (when set) back
	// by d, as if the row were that much older.
	Backdate func(ctx context.Context, id string, d time.Duration) error
	// MaxPayloadBytes is the cap the driver's writer was built with; zero
	// means herald.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
}
