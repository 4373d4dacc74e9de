package heraldmysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

var (
	_ herald.Heartbeats  = (*Driver)(nil)
	_ heraldadmin.Relays = (*Driver)(nil)
)

// maxBeatSpan bounds the durations a heartbeat turns into times: a
// DATETIME(6) ends in year 9999, and a time past it would be NULL, which
// the NOT NULL columns refuse.
const maxBeatSpan = 100 * 365 * 24 * time.Hour

// Beat implements herald.Heartbeats: the expired rows of other relays are
// deleted first, then the relay's own is written, each statement in a READ
// COMMITTED transaction of its own (the deletion scans the small table: it
// must not lock the gaps between rows that other relays' beats insert
// into).
func (d *Driver) Beat(ctx context.Context, b herald.RelayBeat) error {
	if err := sqlstore.CheckBeat(b); err != nil {
		return fmt.Errorf("heraldmysql: %w", err)
	}
	if _, err := d.execTx(ctx, d.q.relayPrune, b.Owner); err != nil {
		return fmt.Errorf("heraldmysql: deleting expired heartbeats: %w", err)
	}
	var sinceClaim sql.NullInt64 // no claim yet: no time
	if b.SinceClaim >= 0 {
		sinceClaim = sql.NullInt64{Int64: min(b.SinceClaim, maxBeatSpan).Microseconds(), Valid: true}
	}
	if _, err := d.execTx(ctx, d.q.relayBeat, b.Owner, b.Version, min(b.Running, maxBeatSpan).Microseconds(),
		min(b.Expiry, maxBeatSpan).Microseconds(), sinceClaim, b.Leased, b.Published, b.First); err != nil {
		return fmt.Errorf("heraldmysql: writing the relay's heartbeat: %w", err)
	}
	return nil
}

// Gone implements herald.Heartbeats.
func (d *Driver) Gone(ctx context.Context, owner string) error {
	if _, err := d.execTx(ctx, d.q.relayGone, owner); err != nil {
		return fmt.Errorf("heraldmysql: removing the relay's heartbeat: %w", err)
	}
	return nil
}

// ListRelays implements heraldadmin.Relays.
func (d *Driver) ListRelays(ctx context.Context) ([]heraldadmin.RelayInfo, error) {
	out := []heraldadmin.RelayInfo{}
	err := collect(ctx, d.db, d.q.relays, nil, func(rows *sql.Rows) error {
		var (
			r                        heraldadmin.RelayInfo
			started, beat, lastClaim datetime
		)
		if err := rows.Scan(&r.Owner, &r.Version, &started, &beat, &lastClaim, &r.Leased, &r.Published); err != nil {
			return err
		}
		r.StartedAt, r.HeartbeatAt, r.LastClaimAt = started.time(), beat.time(), lastClaim.ptr()
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldmysql: listing relays: %w", err)
	}
	return out, nil
}
