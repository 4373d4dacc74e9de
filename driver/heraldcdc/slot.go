package heraldcdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Querier runs one query: a *pgx.Conn, *pgxpool.Pool or pgx.Tx.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SlotInfo is a replication slot's state, as pg_replication_slots shows it
// against the server's current WAL position.
type SlotInfo struct {
	Slot string
	// Active is true while a stream reads the slot.
	Active bool
	// WALStatus is reserved, extended, unreserved or lost (PostgreSQL's
	// wal_status): lost means the slot can no longer stream.
	WALStatus string
	// RetainedBytes is the WAL the slot keeps on the server's disk: from
	// its restart_lsn to the current position.
	RetainedBytes int64
	// LagBytes is the WAL written since the slot's confirmed position.
	LagBytes int64
	// SafeWALBytes is how much more WAL may be written before the slot is
	// in danger of losing what it needs (max_slot_wal_keep_size); -1 when
	// that setting is unlimited.
	SafeWALBytes int64
}

// SlotStatus reads slot's state. It needs pg_current_wal_insert_lsn(), so
// a primary. The distances are measured from where WAL is being inserted,
// not from what was written out: with synchronous_commit off, the written
// position trails committed transactions by up to wal_writer_delay, and a
// slot's lag would read as nothing while it grows.
func SlotStatus(ctx context.Context, q Querier, slot string) (SlotInfo, error) {
	info := SlotInfo{Slot: slot}
	err := q.QueryRow(ctx, `SELECT active, coalesce(wal_status, ''),
		coalesce(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), restart_lsn), 0)::bigint,
		coalesce(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), confirmed_flush_lsn), 0)::bigint,
		coalesce(safe_wal_size, -1)
		FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()`, slot).
		Scan(&info.Active, &info.WALStatus, &info.RetainedBytes, &info.LagBytes, &info.SafeWALBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return info, fmt.Errorf("heraldcdc: replication slot %s does not exist: %w", slot, ErrNoSlot)
	}
	if err != nil {
		return info, fmt.Errorf("heraldcdc: reading slot %s: %w", slot, err)
	}
	return info, nil
}

// ErrNoSlot is SlotStatus's error for a slot that does not exist.
var ErrNoSlot = errors.New("no such replication slot")
