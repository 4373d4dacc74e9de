// Package heraldinbox makes a consumer's handler idempotent. Delivery from
// an outbox is at least once, so the same event can arrive twice: after a
// relay crash, a lost acknowledgement, a broker redelivery. The inbox
// records (consumer, event id) under a unique key in the SAME transaction as
// the handler's side effects:
//
//   - the first delivery inserts the key, runs the handler and commits both;
//   - a duplicate finds the key and is skipped without running the handler;
//   - a handler error rolls back both, so a redelivery retries cleanly;
//   - two deliveries at the same moment meet at the unique key: one runs,
//     the other waits for it and then reports "already processed" (or runs,
//     if the first rolled back). Neither fails.
//
// The database's unique constraint is the whole mechanism; nothing is kept
// in memory. Works with pgx v5 and database/sql on PostgreSQL, and with
// database/sql on SQLite (heraldsqlite.Open).
//
// Retention: inbox rows may be deleted once the broker can no longer
// redeliver the event. Keep them at least as long as the longest
// redelivery window of the source (the stream's retention, a consumer's
// max redelivery age, the outbox's MaxAge plus its retention), with a
// margin; Cleanup deletes older rows in small batches.
package heraldinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Config names the inbox table. A nil *Config means the defaults.
type Config struct {
	// Schema holds the table on PostgreSQL; ignored on SQLite. Defaults to
	// "public".
	Schema string
	// Table is the inbox table's name. Defaults to "herald_inbox".
	Table string
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// MaxKeyLen caps a consumer name and an event id.
const MaxKeyLen = 255

type dialect struct {
	create  []string
	insert  string // returns one row when the key was new
	cleanup string
}

// Inbox is an inbox table on one database.
type Inbox struct {
	d     dialect
	table string
}

func names(cfg *Config, withSchema bool) (schema, table string, err error) {
	schema, table = "public", "herald_inbox"
	if cfg != nil {
		if cfg.Schema != "" {
			schema = cfg.Schema
		}
		if cfg.Table != "" {
			table = cfg.Table
		}
	}
	if withSchema && !identifier.MatchString(schema) {
		return "", "", fmt.Errorf("heraldinbox: Config.Schema %q must match %s", schema, identifier)
	}
	if !identifier.MatchString(table) {
		return "", "", fmt.Errorf("heraldinbox: Config.Table %q must match %s", table, identifier)
	}
	return schema, table, nil
}

// NewPostgres returns an inbox on PostgreSQL.
func NewPostgres(cfg *Config) (*Inbox, error) {
	schema, table, err := names(cfg, true)
	if err != nil {
		return nil, err
	}
	q := `"` + schema + `"."` + table + `"`
	return &Inbox{table: q, d: dialect{
		create: []string{
			`CREATE SCHEMA IF NOT EXISTS "` + schema + `"`,
			`CREATE TABLE IF NOT EXISTS ` + q + ` (
				consumer     text        NOT NULL,
				event_id     text        NOT NULL,
				processed_at timestamptz NOT NULL DEFAULT now(),
				PRIMARY KEY (consumer, event_id))`,
			`CREATE INDEX IF NOT EXISTS "` + table + `_processed_idx" ON ` + q + ` (processed_at)`,
		},
		insert: `INSERT INTO ` + q + ` (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING 1`,
		cleanup: `DELETE FROM ` + q + ` WHERE ctid IN (SELECT ctid FROM ` + q + `
			WHERE processed_at < now() - $1 * interval '1 microsecond' LIMIT $2)`,
	}}, nil
}

// NewSQLite returns an inbox on SQLite.
func NewSQLite(cfg *Config) (*Inbox, error) {
	_, table, err := names(cfg, false)
	if err != nil {
		return nil, err
	}
	q := `"` + table + `"`
	const now = `CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)`
	return &Inbox{table: q, d: dialect{
		create: []string{
			`CREATE TABLE IF NOT EXISTS ` + q + ` (
				consumer     TEXT    NOT NULL,
				event_id     TEXT    NOT NULL,
				processed_at INTEGER NOT NULL DEFAULT (` + now + `),
				PRIMARY KEY (consumer, event_id)) WITHOUT ROWID`,
			`CREATE INDEX IF NOT EXISTS "` + table + `_processed_idx" ON ` + q + ` (processed_at)`,
		},
		insert: `INSERT INTO ` + q + ` (consumer, event_id) VALUES (?, ?) ON CONFLICT DO NOTHING RETURNING 1`,
		cleanup: `DELETE FROM ` + q + ` WHERE (consumer, event_id) IN (SELECT consumer, event_id FROM ` + q + `
			WHERE processed_at < ` + now + ` - ? LIMIT ?)`,
	}}, nil
}

// Table returns the quoted inbox table name.
func (ib *Inbox) Table() string { return ib.table }

func checkKey(consumer, eventID string) error {
	for _, f := range [...]struct{ name, v string }{{"consumer", consumer}, {"event id", eventID}} {
		switch {
		case f.v == "":
			return fmt.Errorf("heraldinbox: empty %s", f.name)
		case len(f.v) > MaxKeyLen:
			return fmt.Errorf("heraldinbox: %s longer than %d bytes", f.name, MaxKeyLen)
		case strings.IndexByte(f.v, 0) >= 0:
			return fmt.Errorf("heraldinbox: %s contains a NUL byte", f.name)
		}
	}
	return nil
}

// PgxBeginner starts pgx transactions: a *pgxpool.Pool, a *pgx.Conn.
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// MigratePgx creates the inbox table if it does not exist.
func (ib *Inbox) MigratePgx(ctx context.Context, db PgxBeginner) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, s := range ib.d.create {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("heraldinbox: migrate: %w", err)
			}
		}
		return nil
	})
}

// MigrateSQL creates the inbox table if it does not exist.
func (ib *Inbox) MigrateSQL(ctx context.Context, db *sql.DB) error {
	return inSQLTx(ctx, db, func(tx *sql.Tx) error {
		for _, s := range ib.d.create {
			if _, err := tx.ExecContext(ctx, s); err != nil {
				return fmt.Errorf("heraldinbox: migrate: %w", err)
			}
		}
		return nil
	})
}

// ProcessPgx runs fn exactly once per (consumer, eventID), in one pgx
// transaction with the inbox record. It returns processed=false, and does
// not call fn, when the event was already processed. An error from fn rolls
// back the transaction and is returned as it is.
func (ib *Inbox) ProcessPgx(ctx context.Context, db PgxBeginner, consumer, eventID string,
	fn func(ctx context.Context, tx pgx.Tx) error) (processed bool, err error) {
	if err := checkKey(consumer, eventID); err != nil {
		return false, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, ib.d.insert, consumer, eventID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // a duplicate: committed as a no-op
		}
		if err != nil {
			return fmt.Errorf("heraldinbox: recording %s/%s: %w", consumer, eventID, err)
		}
		processed = true
		return fn(ctx, tx)
	})
	if err != nil {
		return false, err
	}
	return processed, nil
}

// ProcessSQL is ProcessPgx for database/sql: PostgreSQL through pgx's
// stdlib, or SQLite.
func (ib *Inbox) ProcessSQL(ctx context.Context, db *sql.DB, consumer, eventID string,
	fn func(ctx context.Context, tx *sql.Tx) error) (processed bool, err error) {
	if err := checkKey(consumer, eventID); err != nil {
		return false, err
	}
	err = inSQLTx(ctx, db, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, ib.d.insert, consumer, eventID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("heraldinbox: recording %s/%s: %w", consumer, eventID, err)
		}
		processed = true
		return fn(ctx, tx)
	})
	if err != nil {
		return false, err
	}
	return processed, nil
}

func inSQLTx(ctx context.Context, db *sql.DB, fn func(tx *sql.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// PgxExecer runs pgx statements: a *pgxpool.Pool, a *pgx.Conn.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// CleanupPgx deletes up to limit inbox rows processed more than olderThan
// ago and returns how many. Call it again while it returns limit: small
// statements never hold locks for long.
func (ib *Inbox) CleanupPgx(ctx context.Context, db PgxExecer, olderThan time.Duration, limit int) (int, error) {
	tag, err := db.Exec(ctx, ib.d.cleanup, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("heraldinbox: cleanup: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// CleanupSQL is CleanupPgx for database/sql.
func (ib *Inbox) CleanupSQL(ctx context.Context, db *sql.DB, olderThan time.Duration, limit int) (int, error) {
	res, err := db.ExecContext(ctx, ib.d.cleanup, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("heraldinbox: cleanup: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}
