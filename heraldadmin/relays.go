package heraldadmin

import (
	"context"
	"time"
)

// Relays lists the relays running on an outbox table now, from the
// heartbeats every relay writes to the table's database, so that any
// relay's admin page (and the CLI) sees all of them. Drivers implement it
// next to Admin.
type Relays interface {
	// ListRelays returns the relays whose last heartbeat is recent, oldest
	// start first.
	ListRelays(ctx context.Context) ([]RelayInfo, error)
}

// RelayInfo is one running relay, as its last heartbeat described it.
type RelayInfo struct {
	Owner       string // host/pid, as in claimed_by
	Version     string // the Herald module version it runs
	StartedAt   time.Time
	HeartbeatAt time.Time
	LastClaimAt *time.Time // the last claim that took events; nil before one
	Leased      int64      // claimed rows it holds now
	Published   int64      // events it published since it started
}
