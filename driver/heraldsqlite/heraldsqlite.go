// Package heraldsqlite is Herald's SQLite driver, on modernc.org/sqlite
// (pure Go, no cgo): the outbox table's schema and migrations, the relay's
// store and a writer that joins a caller's *sql.Tx.
//
// SQLite has one writer at a time. Open sets WAL mode, a busy timeout and
// BEGIN IMMEDIATE transactions, and limits the pool to one connection, so
// that writers of one process queue in Go instead of sleeping in SQLite's
// busy handler. A claim is then a single-writer transaction by
// construction: no other claim can see the rows it takes.
//
// The driver's methods implement herald.Store and herald.Admin; they are not
// a stable API of their own.
package heraldsqlite

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Config names the outbox table. A nil *Config means the defaults.
type Config struct {
	// Table is the outbox table's name. Defaults to "herald_outbox".
	Table string
	// MaxPayloadBytes caps a message's payload in the writer. Defaults to
	// 1 MiB.
	MaxPayloadBytes int
}

var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Validate checks the configuration.
func (c *Config) Validate() error {
	_, err := c.table()
	return err
}

func (c *Config) table() (string, error) {
	table := "herald_outbox"
	if c != nil {
		if c.Table != "" {
			table = c.Table
		}
		if c.MaxPayloadBytes < 0 {
			return "", errors.New("heraldsqlite: Config.MaxPayloadBytes must not be negative")
		}
	}
	if !identifier.MatchString(table) {
		return "", fmt.Errorf("heraldsqlite: Config.Table %q must match %s", table, identifier)
	}
	return table, nil
}

// render fills a query template.
func render(table, tmpl string) string {
	return strings.NewReplacer("{{.Table}}", `"`+table+`"`, "{{.Name}}", table, "{{.Now}}", nowSQL).Replace(tmpl)
}

var sqliteHeader = []byte("SQLite format 3\x00")

// Open opens the SQLite database at path, creating it when it does not
// exist, with the settings Herald needs: WAL journal, a 5s busy timeout,
// synchronous=NORMAL, BEGIN IMMEDIATE transactions and one connection. It
// refuses, without changing it, a file that is not a SQLite database.
func Open(path string) (*sql.DB, error) {
	if path == "" {
		return nil, errors.New("heraldsqlite: empty database path")
	}
	if strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("heraldsqlite: database path %q must not contain '?' or '#'", path)
	}
	// Check an existing file before SQLite touches it: opening a file that
	// is not a database in WAL mode would create -wal and -shm files next
	// to it.
	if f, err := os.Open(path); err == nil {
		head := make([]byte, len(sqliteHeader))
		n, _ := io.ReadFull(f, head)
		f.Close()
		if n > 0 && !bytes.Equal(head[:n], sqliteHeader[:n]) || n > 0 && n < len(sqliteHeader) {
			return nil, fmt.Errorf("heraldsqlite: %s is not a SQLite database", path)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("heraldsqlite: cannot open %s: %w", path, errors.Unwrap(err))
	} else if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("heraldsqlite: cannot create %s: directory %s does not exist", path, filepath.Dir(path))
	}
	dsn := "file:" + path + "?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: opening %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("heraldsqlite: cannot open %s: %w", path, err)
	}
	return db, nil
}

//go:embed migrations/*.sql
var migrationFiles embed.FS

type migration struct {
	version int
	name    string
	sql     string
}

var migrations = func() []migration {
	entries, err := migrationFiles.ReadDir("migrations")
	if err != nil {
		panic(err)
	}
	var out []migration
	for _, e := range entries {
		num, _, _ := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if err != nil {
			panic("heraldsqlite: migration file without a version: " + e.Name())
		}
		body, _ := migrationFiles.ReadFile("migrations/" + e.Name())
		out = append(out, migration{v, e.Name(), string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out
}()

func latestVersion() int { return migrations[len(migrations)-1].version }

// Driver is the relay's store and the operators' admin on SQLite.
type Driver struct {
	db    *sql.DB
	table string
	q     queries
}

type queries struct {
	claim, publish, fail, release, rescue, deletePublished, status, migrations, table string
}

// New returns a driver over a database from Open, which the caller owns.
func New(db *sql.DB, cfg *Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("heraldsqlite: New: db is nil")
	}
	table, err := cfg.table()
	if err != nil {
		return nil, err
	}
	r := func(s string) string { return render(table, s) }
	return &Driver{db: db, table: table, q: queries{
		claim: r(claimSQL), publish: r(publishSQL), fail: r(failSQL), release: r(releaseSQL),
		rescue: r(rescueSQL), deletePublished: r(deletePublishedSQL), status: r(statusSQL),
		migrations: `"` + table + `_migrations"`, table: `"` + table + `"`,
	}}, nil
}

// Table returns the quoted outbox table name.
func (d *Driver) Table() string { return d.q.table }

// Migrate creates or upgrades the outbox table in one BEGIN IMMEDIATE
// transaction: SQLite's write lock serialises concurrent migrations. It
// refuses a schema newer than this driver knows.
func (d *Driver) Migrate(ctx context.Context) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("heraldsqlite: migrate: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+d.q.migrations+` (
		version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL DEFAULT (`+nowSQL+`))`); err != nil {
		return fmt.Errorf("heraldsqlite: migrate: %w", err)
	}
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+d.q.migrations).Scan(&current); err != nil {
		return fmt.Errorf("heraldsqlite: migrate: %w", err)
	}
	if current > latestVersion() {
		return d.newerError(current)
	}
	for _, m := range migrations {
		if m.version <= current {
			continue
		}
		if _, err := tx.ExecContext(ctx, render(d.table, m.sql)); err != nil {
			return fmt.Errorf("heraldsqlite: migration %s: %w", m.name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+d.q.migrations+` (version, name) VALUES (?, ?)`, m.version, m.name); err != nil {
			return fmt.Errorf("heraldsqlite: recording migration %s: %w", m.name, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("heraldsqlite: migrate: %w", err)
	}
	return nil
}

func (d *Driver) newerError(v int) error {
	return fmt.Errorf("heraldsqlite: outbox table %s is at schema version %d, newer than this Herald knows (%d): upgrade Herald", d.table, v, latestVersion())
}

// Ping checks the database is readable and migrated to this driver's
// version.
func (d *Driver) Ping(ctx context.Context) error {
	var exists int
	if err := d.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`,
		d.table+"_migrations").Scan(&exists); err != nil {
		return fmt.Errorf("heraldsqlite: %w", err)
	}
	v := 0
	if exists > 0 {
		if err := d.db.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM `+d.q.migrations).Scan(&v); err != nil {
			return fmt.Errorf("heraldsqlite: reading schema version: %w", err)
		}
	}
	switch {
	case v < latestVersion():
		return fmt.Errorf("heraldsqlite: outbox table %s is at schema version %d, this Herald needs %d: run `herald migrate`", d.table, v, latestVersion())
	case v > latestVersion():
		return d.newerError(v)
	}
	return nil
}
