package heraldsqlite

import (
	"context"
	"fmt"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Heartbeats  = (*Driver)(nil)
	_ heraldadmin.Relays = (*Driver)(nil)
)

// Beat implements herald.Heartbeats: the expired rows of other relays are
// deleted first, then the relay's own is written, each statement atomic.
func (d *Driver) Beat(ctx context.Context, b herald.RelayBeat) error {
	if err := sqlstore.CheckBeat(b); err != nil {
		return fmt.Errorf("heraldsqlite: %w", err)
	}
	if _, err := d.exec(ctx, d.q.relayPrune, b.Owner); err != nil {
		return fmt.Errorf("heraldsqlite: deleting expired heartbeats: %w", err)
	}
	sinceClaim := int64(-1)
	if b.SinceClaim >= 0 {
		sinceClaim = b.SinceClaim.Microseconds()
	}
	if _, err := d.exec(ctx, d.q.relayBeat, b.Owner, b.Version, b.Running.Microseconds(), b.Expiry.Microseconds(),
		sinceClaim, b.Leased, b.Published, b.First); err != nil {
		return fmt.Errorf("heraldsqlite: writing the relay's heartbeat: %w", err)
	}
	return nil
}

// Gone implements herald.Heartbeats.
func (d *Driver) Gone(ctx context.Context, owner string) error {
	if _, err := d.exec(ctx, d.q.relayGone, owner); err != nil {
		return fmt.Errorf("heraldsqlite: removing the relay's heartbeat: %w", err)
	}
	return nil
}

// ListRelays implements heraldadmin.Relays.
func (d *Driver) ListRelays(ctx context.Context) ([]heraldadmin.RelayInfo, error) {
	rows, err := d.db.QueryContext(ctx, d.q.relays)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing relays: %w", err)
	}
	defer rows.Close()
	out := []heraldadmin.RelayInfo{}
	for rows.Next() {
		var (
			r                        heraldadmin.RelayInfo
			started, beat, lastClaim micros
		)
		if err := rows.Scan(&r.Owner, &r.Version, &started, &beat, &lastClaim, &r.Leased, &r.Published); err != nil {
			return nil, fmt.Errorf("heraldsqlite: listing relays: %w", err)
		}
		r.StartedAt, r.HeartbeatAt = started.time(), beat.time()
		if lastClaim.valid {
			t := lastClaim.time()
			r.LastClaimAt = &t
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: listing relays: %w", err)
	}
	return out, nil
}
