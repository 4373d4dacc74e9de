// Package heraldpg is Herald's PostgreSQL driver: the outbox table's schema
// and migrations, the relay's store on a pgx v5 pool, and writers that join a
// caller's pgx.Tx or database/sql *sql.Tx (database/sql over pgx's stdlib).
//
// The driver's methods implement herald.Store, herald.Heartbeats,
// heraldadmin.Admin and heraldadmin.Relays; they are not a stable API of
// their own.
package heraldpg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Config names the outbox table. A nil *Config means the defaults.
type Config struct {
	// Schema holds the outbox table. Defaults to "public".
	Schema string
	// Table is the outbox table's name. Defaults to "herald_outbox".
	Table string
	// MaxPayloadBytes caps a message's payload in the writers. Defaults to
	// 1 MiB.
	MaxPayloadBytes int
	// Partition makes Migrate create the outbox table partitioned by
	// time (see "Partitioned outbox" in the package doc); Migrate refuses
	// it for a plain table that exists already, which PartitionExisting
	// converts. Only Migrate and PartitionExisting read it: every driver
	// finds how its table is laid out from the table itself. Defaults to
	// nil: a plain table.
	Partition *Partitioning
}

// names are the validated, quoted identifiers a driver's SQL uses.
type names struct{ sqlstore.Names }

func (c *Config) names() (names, error) {
	schema, table := "public", "herald_outbox"
	if c != nil {
		if c.Schema != "" {
			schema = c.Schema
		}
		if c.Table != "" {
			table = c.Table
		}
		if c.MaxPayloadBytes < 0 {
			return names{}, errors.New("heraldpg: Config.MaxPayloadBytes must not be negative")
		}
		if c.Partition != nil {
			if _, err := c.Partition.withDefaults(); err != nil {
				return names{}, err
			}
		}
	}
	n, err := sqlstore.NewNames("heraldpg", schema, table)
	return names{n}, err
}

// render fills a query template's {{.Table}}, {{.Name}} and {{.Schema}}.
func (n names) render(tmpl string) string { return n.Render(tmpl) }

// Driver is the relay's store and the operators' admin on PostgreSQL.
type Driver struct {
	db    conn
	names names
	q     queries

	// lockSpace is the first key of the per-key advisory locks that ordered
	// claims take, derived from the table name so that two outbox tables
	// never contend.
	lockSpace int32

	cursor sqlstore.KeyCursor // where the last ordered claim's walk stopped

	partitioning *Partitioning // Config.Partition
	layouts      layoutCache   // the table's shape, once known partitioned
	// lastReport is what this driver's last partition maintenance did.
	lastReport atomic.Pointer[MaintenanceReport]
}

// New returns a driver over a pgx pool the caller owns (and closes).
func New(pool *pgxpool.Pool, cfg *Config) (*Driver, error) {
	if pool == nil {
		return nil, errors.New("heraldpg: New: pool is nil")
	}
	return newDriver(pgxConn{pool}, cfg)
}

// NewSQL returns a driver over a database/sql pool the caller owns, opened
// with pgx's stdlib driver ("pgx").
func NewSQL(db *sql.DB, cfg *Config) (*Driver, error) {
	if db == nil {
		return nil, errors.New("heraldpg: NewSQL: db is nil")
	}
	return newDriver(sqlConn{db}, cfg)
}

func newDriver(c conn, cfg *Config) (*Driver, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	h := fnv.New32a()
	h.Write([]byte(n.Qualified))
	d := &Driver{db: c, names: n, q: newQueries(n), lockSpace: int32(h.Sum32())}
	if cfg != nil && cfg.Partition != nil {
		p, err := cfg.Partition.withDefaults()
		if err != nil {
			return nil, err
		}
		d.partitioning = &p
	}
	return d, nil
}

// Table returns the schema-qualified, quoted outbox table name.
func (d *Driver) Table() string { return d.names.Qualified }

// Ping checks the database is reachable and the schema is migrated to the
// version this driver knows.
func (d *Driver) Ping(ctx context.Context) error {
	v, err := d.schemaVersion(ctx, d.db)
	if err != nil {
		return err
	}
	if err := sqlstore.CheckVersion(d.names.Qualified, v, latestVersion()); err != nil {
		return fmt.Errorf("heraldpg: %w", err)
	}
	return nil
}

// SchemaVersion returns the outbox table's schema version (0 when it does
// not exist) and the latest this driver knows, which Migrate brings it to.
func (d *Driver) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	current, err = d.schemaVersion(ctx, d.db)
	return current, latestVersion(), err
}

// Validate checks the configuration without connecting: the schema and
// table names and the payload cap.
func (c *Config) Validate() error {
	_, err := c.names()
	return err
}
