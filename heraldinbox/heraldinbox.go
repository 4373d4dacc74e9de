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
// database/sql on SQLite (heraldsqlite.Open) and on MySQL 8 or MariaDB
// 10.6+ (github.com/go-sql-driver/mysql).
//
// Order: the inbox stops duplicates, not an old event that arrives after a
// newer one. Where producers set herald.Message.AggregateVersion, a handler
// calls AdvancePgx or AdvanceSQL in its transaction: it records the last
// version the consumer handled per aggregate and refuses, with ErrStale,
// an event whose version is not newer. Events without a version pass.
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
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Config names the inbox's tables. A nil *Config means the defaults.
type Config struct {
	// Schema holds the tables: the schema on PostgreSQL, the database on
	// MySQL and MariaDB; ignored on SQLite. Defaults to "public" on
	// PostgreSQL and to the connection's current database on MySQL.
	Schema string
	// Table is the inbox table's name. Defaults to "herald_inbox".
	Table string
	// VersionTable is the table of the last aggregate version each
	// consumer handled (AdvancePgx, AdvanceSQL). Defaults to Table with
	// "_versions" appended.
	VersionTable string
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// MaxKeyLen caps a consumer name and an event id.
const MaxKeyLen = 255

// The dialects, as named in errors and in migrations/.
const (
	postgres = "postgres"
	sqlite   = "sqlite"
	mysql    = "mysql"
)

type dialect struct {
	name    string
	create  []string
	ddlInTx bool   // false on MySQL, which commits every DDL statement on its own
	insert  string // affects one row when the key was new
	cleanup string
	// The aggregate versions (versions.go): ensure, when set, makes sure
	// the aggregate's row exists and locks it; advance raises its version
	// and affects one row when the event's version was newer; last reads
	// it. advanceArgs gives advance's arguments; the others take keyArgs.
	ensure, advance, last string
	advanceArgs           func(consumer string, a Aggregate) []any
}

// Inbox is an inbox table, and its table of aggregate versions, on one
// database.
type Inbox struct {
	d        dialect
	table    string
	versions string
}

type tableNames struct {
	schema, table, versions string
}

func names(cfg *Config, defaultSchema string) (n tableNames, err error) {
	n = tableNames{schema: defaultSchema, table: "herald_inbox"}
	if cfg != nil {
		if cfg.Schema != "" {
			n.schema = cfg.Schema
		}
		if cfg.Table != "" {
			n.table = cfg.Table
		}
		n.versions = cfg.VersionTable
	}
	if n.versions == "" {
		n.versions = n.table + "_versions"
	}
	if n.schema != "" && !identifier.MatchString(n.schema) {
		return n, fmt.Errorf("heraldinbox: Config.Schema %q must match %s", n.schema, identifier)
	}
	if !identifier.MatchString(n.table) {
		return n, fmt.Errorf("heraldinbox: Config.Table %q must match %s", n.table, identifier)
	}
	// The default is the table's name and 9 bytes more: within every
	// database's limit on identifiers (63 bytes on PostgreSQL).
	if cfg != nil && cfg.VersionTable != "" && !identifier.MatchString(n.versions) {
		return n, fmt.Errorf("heraldinbox: Config.VersionTable %q must match %s", n.versions, identifier)
	}
	if n.versions == n.table {
		return n, fmt.Errorf("heraldinbox: Config.VersionTable %q is the inbox table", n.versions)
	}
	return n, nil
}

// replacer fills a migration's {{.Schema}}, {{.Table}}, {{.Versions}} and
// {{.Name}} (the inbox table's bare name, for its index), quoted with q,
// and the dialect's own placeholders given as old, new pairs.
func (n tableNames) replacer(q string, extra ...string) (r *strings.Replacer, table, versions string) {
	prefix := ""
	if n.schema != "" {
		prefix = q + n.schema + q + "."
	}
	table, versions = prefix+q+n.table+q, prefix+q+n.versions+q
	return strings.NewReplacer(append([]string{
		"{{.Schema}}", q + n.schema + q,
		"{{.Table}}", table,
		"{{.Versions}}", versions,
		"{{.Name}}", n.table,
	}, extra...)...), table, versions
}

// keyArgs are the arguments of a statement on one aggregate's row.
func keyArgs(consumer string, a Aggregate) []any {
	return []any{consumer, a.Type, a.ID}
}

// NewPostgres returns an inbox on PostgreSQL.
func NewPostgres(cfg *Config) (*Inbox, error) {
	n, err := names(cfg, "public")
	if err != nil {
		return nil, err
	}
	r, q, v := n.replacer(`"`)
	return &Inbox{table: q, versions: v, d: dialect{
		name:    postgres,
		create:  migrationStatements(postgres, r),
		ddlInTx: true,
		insert:  `INSERT INTO ` + q + ` (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		cleanup: `DELETE FROM ` + q + ` WHERE ctid IN (SELECT ctid FROM ` + q + `
			WHERE processed_at < now() - $1 * interval '1 microsecond' LIMIT $2)`,
		// One statement: a delivery racing this one on the same new
		// aggregate waits at the primary key for this transaction, then
		// (READ COMMITTED) takes the update path against the version it
		// committed, or inserts if it rolled back.
		advance: `INSERT INTO ` + v + ` AS v (consumer, aggregate_type, aggregate_id, version)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (consumer, aggregate_type, aggregate_id)
			DO UPDATE SET version = EXCLUDED.version, updated_at = now()
			WHERE v.version < EXCLUDED.version`,
		advanceArgs: func(consumer string, a Aggregate) []any { return append(keyArgs(consumer, a), a.Version) },
		last:        `SELECT version FROM ` + v + ` WHERE consumer = $1 AND aggregate_type = $2 AND aggregate_id = $3`,
	}}, nil
}

// NewSQLite returns an inbox on SQLite.
func NewSQLite(cfg *Config) (*Inbox, error) {
	if cfg != nil {
		c := *cfg
		c.Schema = "" // SQLite has no schemas: ignored, as documented
		cfg = &c
	}
	n, err := names(cfg, "")
	if err != nil {
		return nil, err
	}
	const now = `CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)`
	r, q, v := n.replacer(`"`, "{{.Now}}", now)
	return &Inbox{table: q, versions: v, d: dialect{
		name:    sqlite,
		create:  migrationStatements(sqlite, r),
		ddlInTx: true,
		insert:  `INSERT INTO ` + q + ` (consumer, event_id) VALUES (?, ?) ON CONFLICT DO NOTHING`,
		cleanup: `DELETE FROM ` + q + ` WHERE (consumer, event_id) IN (SELECT consumer, event_id FROM ` + q + `
			WHERE processed_at < ` + now + ` - ? LIMIT ?)`,
		// SQLite runs one writer at a time: the statement reads and raises
		// the version under the database's write lock.
		advance: `INSERT INTO ` + v + ` (consumer, aggregate_type, aggregate_id, version)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (consumer, aggregate_type, aggregate_id)
			DO UPDATE SET version = excluded.version, updated_at = ` + now + `
			WHERE ` + v + `.version < excluded.version`,
		advanceArgs: func(consumer string, a Aggregate) []any { return append(keyArgs(consumer, a), a.Version) },
		last:        `SELECT version FROM ` + v + ` WHERE consumer = ? AND aggregate_type = ? AND aggregate_id = ?`,
	}}, nil
}

// NewMySQL returns an inbox on MySQL 8 or MariaDB 10.6+, through
// database/sql and github.com/go-sql-driver/mysql.
func NewMySQL(cfg *Config) (*Inbox, error) {
	n, err := names(cfg, "")
	if err != nil {
		return nil, err
	}
	r, q, v := n.replacer("`")
	return &Inbox{table: q, versions: v, d: dialect{
		name:   mysql,
		create: migrationStatements(mysql, r),
		// INSERT IGNORE, not ON DUPLICATE KEY UPDATE: its count of
		// affected rows for a duplicate does not depend on the
		// connection's clientFoundRows. It ignores only the duplicate
		// here: the keys were checked against the columns' sizes.
		insert:  `INSERT IGNORE INTO ` + q + ` (consumer, event_id) VALUES (?, ?)`,
		cleanup: `DELETE FROM ` + q + ` WHERE processed_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ?`,
		// Two statements (see mysqlAdvance in versions.go).
		ensure: `INSERT INTO ` + v + ` (consumer, aggregate_type, aggregate_id, version)
			VALUES (?, ?, ?, 0) ON DUPLICATE KEY UPDATE version = version`,
		advance: `UPDATE ` + v + ` SET version = ?, updated_at = UTC_TIMESTAMP(6)
			WHERE consumer = ? AND aggregate_type = ? AND aggregate_id = ? AND version < ?`,
		advanceArgs: func(consumer string, a Aggregate) []any {
			return []any{a.Version, consumer, a.Type, a.ID, a.Version}
		},
		// A locking read, which sees the latest version whatever the
		// transaction's snapshot: the row is this transaction's already.
		last: `SELECT version FROM ` + v + ` WHERE consumer = ? AND aggregate_type = ? AND aggregate_id = ? FOR UPDATE`,
	}}, nil
}

// Table returns the quoted inbox table name.
func (ib *Inbox) Table() string { return ib.table }

// VersionTable returns the quoted name of the table of aggregate versions.
func (ib *Inbox) VersionTable() string { return ib.versions }

func checkKey(consumer, eventID string) error {
	for _, f := range [...]struct{ name, v string }{{"consumer", consumer}, {"event id", eventID}} {
		if err := checkText(f.name, f.v, MaxKeyLen); err != nil {
			return err
		}
	}
	return nil
}

func checkText(name, v string, maxLen int) error {
	switch {
	case v == "":
		return fmt.Errorf("heraldinbox: empty %s", name)
	case len(v) > maxLen:
		return fmt.Errorf("heraldinbox: %s longer than %d bytes", name, maxLen)
	case strings.IndexByte(v, 0) >= 0:
		return fmt.Errorf("heraldinbox: %s contains a NUL byte", name)
	}
	return nil
}

// pgxOnly refuses a pgx call on an inbox of another database: its SQL
// would not parse there.
func (ib *Inbox) pgxOnly(method string) error {
	if ib.d.name != postgres {
		return fmt.Errorf("heraldinbox: %s needs an inbox of NewPostgres, not of %s; use the SQL methods", method, ib.d.name)
	}
	return nil
}

// PgxBeginner starts pgx transactions: a *pgxpool.Pool, a *pgx.Conn.
type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// MigratePgx creates the inbox's tables, or brings them to this version's
// schema. It can run any number of times.
func (ib *Inbox) MigratePgx(ctx context.Context, db PgxBeginner) error {
	if err := ib.pgxOnly("MigratePgx"); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		for _, s := range ib.d.create {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("heraldinbox: migrate: %w", err)
			}
		}
		return nil
	})
}

// MigrateSQL creates the inbox's tables, or brings them to this version's
// schema. It can run any number of times. On MySQL every statement
// commits on its own; a migration cut short is finished by the next call.
func (ib *Inbox) MigrateSQL(ctx context.Context, db *sql.DB) error {
	run := func(exec func(ctx context.Context, query string, args ...any) (sql.Result, error)) error {
		for _, s := range ib.d.create {
			if _, err := exec(ctx, s); err != nil {
				return fmt.Errorf("heraldinbox: migrate: %w", err)
			}
		}
		return nil
	}
	if !ib.d.ddlInTx {
		return run(db.ExecContext)
	}
	return inSQLTx(ctx, db, func(tx *sql.Tx) error { return run(tx.ExecContext) })
}

// ProcessPgx runs fn exactly once per (consumer, eventID), in one pgx
// transaction with the inbox record. It returns processed=false, and does
// not call fn, when the event was already processed. An error from fn rolls
// back the transaction and is returned as it is.
func (ib *Inbox) ProcessPgx(ctx context.Context, db PgxBeginner, consumer, eventID string,
	fn func(ctx context.Context, tx pgx.Tx) error) (processed bool, err error) {
	if err := ib.pgxOnly("ProcessPgx"); err != nil {
		return false, err
	}
	if err := checkKey(consumer, eventID); err != nil {
		return false, err
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, ib.d.insert, consumer, eventID)
		if err != nil {
			return fmt.Errorf("heraldinbox: recording %s/%s: %w", consumer, eventID, err)
		}
		if tag.RowsAffected() == 0 {
			return nil // a duplicate: committed as a no-op
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
// stdlib, SQLite, MySQL or MariaDB.
func (ib *Inbox) ProcessSQL(ctx context.Context, db *sql.DB, consumer, eventID string,
	fn func(ctx context.Context, tx *sql.Tx) error) (processed bool, err error) {
	if err := checkKey(consumer, eventID); err != nil {
		return false, err
	}
	err = inSQLTx(ctx, db, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, ib.d.insert, consumer, eventID)
		if err != nil {
			return fmt.Errorf("heraldinbox: recording %s/%s: %w", consumer, eventID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("heraldinbox: recording %s/%s: %w", consumer, eventID, err)
		}
		if n == 0 {
			return nil // a duplicate: committed as a no-op
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
// statements never hold locks for long. It leaves the aggregate versions:
// they are needed as long as events of the aggregate may come.
func (ib *Inbox) CleanupPgx(ctx context.Context, db PgxExecer, olderThan time.Duration, limit int) (int, error) {
	if err := ib.pgxOnly("CleanupPgx"); err != nil {
		return 0, err
	}
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
