package heraldpg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Heartbeats  = (*Driver)(nil)
	_ heraldadmin.Relays = (*Driver)(nil)
)

// Beat implements herald.Heartbeats in one statement.
func (d *Driver) Beat(ctx context.Context, b herald.RelayBeat) error {
	if err := sqlstore.CheckBeat(b); err != nil {
		return fmt.Errorf("heraldpg: %w", err)
	}
	sinceClaim := int64(-1)
	if b.SinceClaim >= 0 {
		sinceClaim = b.SinceClaim.Microseconds()
	}
	if _, err := d.db.exec(ctx, d.q.relayBeat, b.Owner, b.Version, b.Running.Microseconds(), b.Expiry.Microseconds(),
		sinceClaim, b.Leased, b.Published, b.First); err != nil {
		return fmt.Errorf("heraldpg: writing the relay's heartbeat: %w", err)
	}
	return nil
}

// Gone implements herald.Heartbeats.
func (d *Driver) Gone(ctx context.Context, owner string) error {
	if _, err := d.db.exec(ctx, d.q.relayGone, owner); err != nil {
		return fmt.Errorf("heraldpg: removing the relay's heartbeat: %w", err)
	}
	return nil
}

// ListRelays implements heraldadmin.Relays.
func (d *Driver) ListRelays(ctx context.Context) ([]heraldadmin.RelayInfo, error) {
	out := []heraldadmin.RelayInfo{}
	err := d.db.query(ctx, d.q.relays, nil, func(scan func(...any) error) error {
		var (
			r         heraldadmin.RelayInfo
			lastClaim pgtype.Timestamptz
		)
		if err := scan(&r.Owner, &r.Version, &r.StartedAt, &r.HeartbeatAt, &lastClaim, &r.Leased, &r.Published); err != nil {
			return err
		}
		if lastClaim.Valid {
			r.LastClaimAt = &lastClaim.Time
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: listing relays: %w", err)
	}
	return out, nil
}
