// Package heraldsqlite is Herald's SQLite driver, on modernc.org/sqlite (pure
// Go, no cgo): the outbox table's schema and migrations, the relay's store,
// and a writer that joins a caller's database/sql transaction.
//
// SQLite has one writer at a time and no SKIP LOCKED: every claim,
// acknowledgement and producer transaction takes the database's write lock
// in turn. Open configures a database for that (WAL, a busy timeout,
// BEGIN IMMEDIATE transactions); a *sql.DB opened another way should do the
// same, or concurrent writers fail with SQLITE_BUSY.
//
// Timestamps are stored as integer microseconds since the Unix epoch, taken
// from the database clock in SQL (for SQLite, the clock of the host running
// the process that runs the statement).
//
// The driver's methods implement herald.Store, herald.Heartbeats,
// heraldadmin.Admin and heraldadmin.Relays; they are not a stable API of
// their own.
package heraldsqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Config names the outbox table. A nil *Config means the defaults.
type Config struct {
	// Table is the outbox table's name. Defaults to "herald_outbox".
	Table string
	// MaxPayloadBytes caps a message's payload in the writer. Defaults to
	// 1 MiB.
	MaxPayloadBytes int
}

// Validate checks the configuration without touching a database.
func (c *Config) Validate() error {
	_, err := c.names()
	return err
}

// names are the validated, quoted identifiers a driver's SQL uses.
type names struct{ sqlstore.Names }

func (c *Config) names() (names, error) {
	table := "herald_outbox"
	if c != nil {
		if c.Table != "" {
			table = c.Table
		}
		if c.MaxPayloadBytes < 0 {
			return names{}, errors.New("heraldsqlite: Config.MaxPayloadBytes must not be negative")
		}
	}
	if strings.HasPrefix(table, "sqlite_") {
		// SQLite reserves these names for its own tables.
		return names{}, fmt.Errorf("heraldsqlite: Config.Table %q must not start with sqlite_", table)
	}
	n, err := sqlstore.NewNames("heraldsqlite", "", table)
	return names{n}, err
}

// render fills a query template's {{.Table}}, {{.Migrations}}, {{.Name}} and
// {{.Now}}.
func (n names) render(tmpl string) string { return n.Render(tmpl, "{{.Now}}", nowMicros) }

// Driver is the relay's store and the operators' admin on SQLite.
type Driver struct {
	db    *sql.DB
	names names
	q     queries

	cursor sqlstore.KeyCursor // where the last ordered claim's walk stopped
	// claimMu runs this driver's claims one at a time. SQLite has one
	// writer, so concurrent claims of one relay (RelayConfig.
	// ClaimConcurrency) cannot run together anyway; queued in the pool's
	// busy handlers they stalled each other past their deadline instead.
	claimMu sync.Mutex
}

// New returns a driver over a database the caller owns (and closes),
// preferably opened with Open.
func New(db *sql.DB, cfg *Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("heraldsqlite: New: db is nil")
	}
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return &Driver{db: db, names: n, q: newQueries(n)}, nil
}

// Table returns the quoted outbox table name.
func (d *Driver) Table() string { return d.names.Qualified }

// Ping checks the database is reachable and the schema is migrated to the
// version this driver knows.
func (d *Driver) Ping(ctx context.Context) error {
	v, err := d.schemaVersion(ctx, d.db)
	if err != nil {
		return err
	}
	if err := sqlstore.CheckVersion(d.names.Qualified, v, latestVersion()); err != nil {
		return fmt.Errorf("heraldsqlite: %w", err)
	}
	return nil
}
