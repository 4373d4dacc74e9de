// Package pgodd holds the odd PostgreSQL rows the relay must survive: rows
// other programs wrote with plain SQL before migration 004 added its
// checks. The store suite (driver/internal/pgtest) and the fault-injection
// suite (internal/faultsuite) write the same list.
package pgodd

import (
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Checks are the names of migration 004's constraints, after the table's
// name and an underscore.
var Checks = []string{"attempts_range", "pending_times_finite", "relay_times_finite", "claim_has_lease", "parked_is_dead"}

// Row is a row of values PostgreSQL's column types admit but Herald never
// writes: what it must become, and the columns it sets besides topic, key
// and payload, with their values, as SQL.
type Row struct {
	Want        heralddrivertest.OddRow
	Cols, Value string
}

var (
	published = heraldadmin.StatePublished
	dead      = heraldadmin.StateDead
)

// Rows are the odd rows of every kind the relay must survive.
var Rows = []Row{
	{heralddrivertest.OddRow{Class: "attempts at the integer maximum", Want: published, Delivered: true,
		Attempt: sqlstore.MaxAttempts}, "attempts", "2147483647"},
	{heralddrivertest.OddRow{Class: "attempts at the integer minimum", Want: published, Delivered: true, Attempt: 1},
		"attempts", "-2147483648"},
	{heralddrivertest.OddRow{Class: "created_at at infinity", Want: dead,
		Reason: "herald: unreadable row: created_at is infinity"}, "created_at", "'infinity'"},
	{heralddrivertest.OddRow{Class: "created_at at -infinity", Want: dead,
		Reason: "herald: unreadable row: created_at is -infinity"}, "created_at", "'-infinity'"},
	{heralddrivertest.OddRow{Class: "available_at at -infinity", Want: published, Delivered: true, Attempt: 1},
		"available_at", "'-infinity'"},
	{heralddrivertest.OddRow{Class: "available_at at infinity: never due", Want: heraldadmin.StateReady},
		"available_at", "'infinity'"},
	{heralddrivertest.OddRow{Class: "claimed with no claim token and no lease", Want: published, Delivered: true, Attempt: 1},
		"state", "'claimed'"},
	{heralddrivertest.OddRow{Class: "claimed with a lease that never ends", Want: published, Delivered: true, Attempt: 1},
		"state, claim_token, lease_until", "'claimed', gen_random_uuid(), 'infinity'"},
	{heralddrivertest.OddRow{Class: "published at infinity, created at -infinity", Want: published},
		"state, published_at, created_at", "'published', 'infinity', '-infinity'"},
	{heralddrivertest.OddRow{Class: "dead, parking its key, with no dead_at", Want: dead, Reason: "written dead"},
		"state, parked, last_error", "'dead', true, 'written dead'"},
	{heralddrivertest.OddRow{Class: "dead at -infinity, created and available at infinity", Want: dead, Reason: "written dead"},
		"state, dead_at, created_at, available_at, last_error", "'dead', '-infinity', 'infinity', 'infinity', 'written dead'"},
}
