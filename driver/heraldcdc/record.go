package heraldcdc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The record of positions (heraldpg's migration 009, <table>_cdc) holds,
// per slot, the furthest position the stream let the slot confirm, written
// before PostgreSQL is told. So the slot's confirmed position never passes
// the record while Herald alone moves it. A slot of the same name that is
// past the record was not moved by Herald: it was dropped and created
// again while the relay was stopped (or confirmed by another program), and
// whatever committed between the record and its start was never read.
// Open refuses it, and a missing slot that has a record, instead of
// skipping those events silently.

// positions is one slot's row of the record.
type positions struct {
	table string // quoted, schema-qualified
	slot  string
}

func newPositions(c Config) positions {
	return positions{table: pgx.Identifier{c.Schema, c.Table + "_cdc"}.Sanitize(), slot: c.Slot}
}

// Recorded is a slot's row of the record.
type Recorded struct {
	Position pglogrepl.LSN
	// At is when the transaction that ends at Position committed, by the
	// database clock (its updated_at column); when it was raised for a
	// heartbeat or a keepalive, which come while nothing is left
	// unconfirmed, when it was raised. Every transaction the slot had not
	// confirmed committed after it, however far behind the relay was:
	// the recovery requeues the streamed rows from there (less
	// RecoveryMargin). The time it was raised would miss the rows of a
	// relay that lagged by more than the margin.
	At time.Time
}

// recorded reads the slot's row; ok is false without one.
func (p positions) recorded(ctx context.Context, q Querier) (r Recorded, ok bool, err error) {
	var raw string
	err = q.QueryRow(ctx, `SELECT position::text, updated_at FROM `+p.table+` WHERE slot = $1`, p.slot).Scan(&raw, &r.At)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return r, false, nil
	case isUndefinedTable(err):
		return r, false, fmt.Errorf("heraldcdc: %s does not exist: run herald migrate (the change-data-capture relay needs schema version 9)", p.table)
	case err != nil:
		return r, false, fmt.Errorf("heraldcdc: reading %s: %w", p.table, err)
	}
	r.Position, err = pglogrepl.ParseLSN(raw)
	return r, true, err
}

// record raises the slot's recorded position to lsn (never lowers it),
// with the commit time of the transaction that ends there (Recorded.At);
// a zero committed, or one past the database's clock, is now().
func (p positions) record(ctx context.Context, q execer, lsn pglogrepl.LSN, committed time.Time) error {
	var at *time.Time
	if !committed.IsZero() {
		at = &committed
	}
	_, err := q.Exec(ctx, `INSERT INTO `+p.table+` AS r (slot, position, updated_at)
		VALUES ($1, $2::pg_lsn, least(now(), coalesce($3::timestamptz, now())))
		ON CONFLICT (slot) DO UPDATE SET position = greatest(r.position, EXCLUDED.position),
			updated_at = CASE WHEN EXCLUDED.position >= r.position THEN EXCLUDED.updated_at ELSE r.updated_at END`,
		p.slot, lsn.String(), at)
	if err != nil {
		return fmt.Errorf("heraldcdc: recording the position of slot %s: %w", p.slot, err)
	}
	return nil
}

// execer runs a statement: a *pgx.Conn.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// check compares the slot's confirmed position with the record. A slot
// without a row (a new record, or one made by CreateSlot just now) is
// recorded as it stands.
func (p positions) check(ctx context.Context, conn *pgx.Conn, confirmed pglogrepl.LSN) error {
	r, ok, err := p.recorded(ctx, conn)
	switch {
	case err != nil:
		return err
	case !ok:
		return p.record(ctx, conn, confirmed, time.Time{})
	case confirmed > r.Position:
		return &refusal{fmt.Sprintf("heraldcdc: replication slot %s confirms %s, past %s, the furthest position Herald let it confirm "+
			"(committed at %s): it was dropped and created again while no relay read it, and what committed in between was never read from it. "+
			"%s", p.slot, confirmed, r.Position, r.At.UTC().Format(time.RFC3339), recovery(p.slot, r))}
	}
	return nil
}

// missing is the refusal of a slot that does not exist although Herald
// read from it. tl is the server's WAL timeline (0 when unknown): past the
// first, the server was promoted from a standby (or restored from a
// backup), and the slot most likely stayed on the old primary, since
// PostgreSQL 15 and earlier copy no logical replication slot to a
// standby. Either way, what committed after the record was read from no
// slot here.
func (p positions) missing(r Recorded, tl int) error {
	why := "it was dropped"
	if tl > 1 {
		why = fmt.Sprintf("this server is on WAL timeline %d: it was promoted from a standby (a failover) or restored from a backup, "+
			"and logical replication slots stay on the server that made them (PostgreSQL does not copy them to standbys), "+
			"so the slot was left behind on the old primary, or it was dropped", tl)
	}
	return &refusal{fmt.Sprintf("heraldcdc: replication slot %s does not exist, but Herald read from it up to %s (committed at %s): "+
		"%s, and what committed after that was never read from it here. %s",
		p.slot, r.Position, r.At.UTC().Format(time.RFC3339), why, recovery(p.slot, r))}
}

// timeline reads the server's current WAL timeline from the name of the
// WAL file being written (its first 8 hex digits), or 0 when it cannot.
func timeline(ctx context.Context, q Querier) int {
	var name string
	if err := q.QueryRow(ctx, `SELECT pg_walfile_name(pg_current_wal_insert_lsn())`).Scan(&name); err != nil || len(name) < 8 {
		return 0
	}
	tl, err := strconv.ParseUint(name[:8], 16, 32)
	if err != nil {
		return 0
	}
	return int(tl)
}

// recovery says how to deliver the events a dropped slot never handed
// out: make the streamed rows written since the record's time ready, so
// that polling delivers them (some were published already: the broker's
// dedup ids drop those within their window), and forget the record.
func recovery(slot string, r Recorded) string {
	since := r.At.Add(-RecoveryMargin).UTC().Format(time.RFC3339)
	return fmt.Sprintf("To recover: herald source poll --cdc-slot %s --requeue-since %s (it makes new events polled and the streamed "+
		"rows written since then ready, and forgets the slot's record), relay by polling until herald status shows them published, "+
		"then start herald relay --source cdc --cdc-create-slot again", slot, since)
}

// RecoveryMargin is how far before a dropped slot's last recorded position
// the recovery makes streamed rows ready again: a row's created_at is
// when its transaction began, which may be that long before it committed.
const RecoveryMargin = time.Hour

func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
