package heraldcdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

// checkNotStreamedYet refuses a table whose inserts default to the
// streamed state while no replication slot of its record exists: the
// switch came before the slot, so the rows inserted since are ones no
// claim takes and no slot will read (one made now starts at the current
// position), and events written as messages (heraldpg's EmitMessages)
// are gone. herald.Relay.Start makes inserts streamed only once its
// Source holds the slot; this catches the switch made by hand. Another
// slot of the table that exists reads what was streamed, so a second one
// may be made beside it.
func checkNotStreamedYet(ctx context.Context, conn *pgx.Conn, c Config) error {
	table := pgx.Identifier{c.Schema, c.Table}.Sanitize()
	var def string
	err := conn.QueryRow(ctx, `SELECT coalesce(pg_get_expr(ad.adbin, ad.adrelid), '')
		FROM pg_attribute a
		LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attname = 'state' AND NOT a.attisdropped`, table).Scan(&def)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // no state column: not migrated, which the stream reports later
	case err != nil:
		return fmt.Errorf("heraldcdc: reading the state column's default of %s: %w", table, err)
	case !strings.HasPrefix(def, "'streamed'"):
		return nil
	}
	var (
		read  bool
		since time.Time
	)
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+newPositions(c).table+` r
			JOIN pg_replication_slots s ON s.slot_name = r.slot AND s.database = current_database()),
		coalesce((SELECT min(created_at) FROM `+table+` WHERE state = 'streamed'), now())`).Scan(&read, &since)
	if err != nil {
		return fmt.Errorf("heraldcdc: reading the slots and streamed rows of %s: %w", table, err)
	}
	if read {
		return nil
	}
	// From the oldest streamed row, less the margin a row's created_at
	// (its transaction's start) may lie before its commit. Some may have
	// been read by a slot dropped since: at least once, their repeats are
	// for the brokers' dedup ids to drop.
	at := since.Add(-RecoveryMargin).UTC().Format(time.RFC3339)
	return refuse("heraldcdc: the inserts of %s default to the streamed state, but no replication slot reads the table (slot %s does not exist): "+
		"they were made streamed before the slot, so the rows inserted since are taken by no claim, and a slot made now would start after them. "+
		"Let the relay make inserts streamed (herald.Relay.Start does, once its Source holds the slot). "+
		"To recover: herald source poll --cdc-slot %s --requeue-since %s (in Go: heraldpg's Driver.PollStreamed from that time) makes new events polled and those rows ready for the polling relays; "+
		"then start with Config.CreateSlot (herald relay --source cdc --cdc-create-slot)",
		table, c.Slot, c.Slot, at)
}
