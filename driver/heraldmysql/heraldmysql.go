// Package heraldmysql is Herald's MySQL and MariaDB driver, on
// github.com/go-sql-driver/mysql: the outbox table's schema and migrations,
// the relay's store, and a writer that joins a caller's database/sql
// transaction. It needs MySQL 8.0.16 or later, or MariaDB 10.6 or later:
// SKIP LOCKED, JSON_TABLE, expression defaults and enforced CHECK
// constraints.
//
// Timestamps are DATETIME(6) in UTC, taken from the database clock in SQL
// (UTC_TIMESTAMP(6)), so that neither the server's nor the session's time
// zone matters; the driver reads them whatever the DSN's parseTime and loc.
//
// Claims run in READ COMMITTED transactions whatever the pool's default
// isolation: under REPEATABLE READ, InnoDB's locking reads take next-key
// locks on the ranges they scan, which would stall producers inserting
// into those ranges and make SKIP LOCKED wait on gaps. The writer's INSERT
// runs in the caller's transaction at the caller's isolation.
//
// Open the pool with interpolateParams=true in the DSN unless its
// character set forbids it: go-sql-driver then sends each statement with
// its arguments in one round trip, where it otherwise prepares, executes
// and closes a statement each time. A claim runs half a dozen statements
// or more, so it is faster so (herald's commands set it unless the URL
// says otherwise).
//
// The driver's methods implement herald.Store, herald.Heartbeats,
// heraldadmin.Admin, heraldadmin.Published, heraldadmin.Relays and
// heraldadmin.Retrying; they are not a stable API of their own.
package heraldmysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Config names the outbox table. A nil *Config means the defaults.
type Config struct {
	// Database holds the outbox table. Defaults to the connection's
	// current database (the DSN's /dbname).
	Database string
	// Table is the outbox table's name. Defaults to "herald_outbox".
	Table string
	// MaxPayloadBytes caps a message's payload in the writer. Defaults to
	// 1 MiB. The server's max_allowed_packet must hold a payload of this
	// size, with room to spare.
	MaxPayloadBytes int
}

// Validate checks the configuration without connecting: the database and
// table names and the payload cap.
func (c *Config) Validate() error {
	_, err := c.names()
	return err
}

// names are the validated, quoted identifiers a driver's SQL uses. MySQL
// quotes identifiers with backticks (double quotes are strings unless
// ANSI_QUOTES is set), so Qualified, Migrations, Pauses and Relays are
// backquoted here;
// sqlstore.NewNames only validates.
type names struct {
	sqlstore.Names
}

func (c *Config) names() (names, error) {
	database, table := "", "herald_outbox"
	if c != nil {
		database = c.Database
		if c.Table != "" {
			table = c.Table
		}
		if c.MaxPayloadBytes < 0 {
			return names{}, errors.New("heraldmysql: Config.MaxPayloadBytes must not be negative")
		}
	}
	n, err := sqlstore.NewNames("heraldmysql", database, table)
	if err != nil {
		return names{}, errors.New(strings.ReplaceAll(err.Error(), "Config.Schema", "Config.Database"))
	}
	prefix := ""
	if database != "" {
		prefix = "`" + database + "`."
	}
	n.Qualified = prefix + "`" + table + "`"
	n.Migrations = prefix + "`" + table + "_migrations`"
	n.Pauses = prefix + "`" + table + "_pauses`"
	n.Relays = prefix + "`" + table + "_relays`"
	return names{n}, nil
}

// render fills a query template's {{.Table}}, {{.Migrations}},
// {{.Pauses}}, {{.Relays}} and {{.Name}}.
func (n names) render(tmpl string) string { return n.Render(tmpl) }

// Driver is the relay's store and the operators' admin on MySQL or
// MariaDB.
type Driver struct {
	db    *sql.DB
	names names
	q     queries

	cursor sqlstore.KeyCursor // where the last ordered claim's walk stopped
}

// New returns a driver over a database/sql pool the caller owns (and
// closes), opened with the "mysql" driver of github.com/go-sql-driver/mysql.
func New(db *sql.DB, cfg *Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("heraldmysql: New: db is nil")
	}
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return &Driver{db: db, names: n, q: newQueries(n)}, nil
}

// Table returns the quoted outbox table name, qualified by its database
// when Config.Database is set.
func (d *Driver) Table() string { return d.names.Qualified }

// Ping checks the database is reachable and the schema is migrated to the
// version this driver knows.
func (d *Driver) Ping(ctx context.Context) error {
	v, err := d.schemaVersion(ctx, d.db)
	if err != nil {
		return err
	}
	if err := sqlstore.CheckVersion(d.names.Qualified, v, latestVersion()); err != nil {
		return fmt.Errorf("heraldmysql: %w", err)
	}
	return nil
}

// SchemaVersion returns the outbox table's schema version (0 when it does
// not exist) and the latest this driver knows, which Migrate brings it to.
func (d *Driver) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	current, err = d.schemaVersion(ctx, d.db)
	return current, latestVersion(), err
}
