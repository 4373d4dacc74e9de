// Package heraldpg is Herald's PostgreSQL driver: the outbox table's schema
// and migrations, the relay's store on a pgx v5 pool, and writers that join a
// caller's pgx.Tx or database/sql *sql.Tx (database/sql over pgx's stdlib).
//
// The driver's methods implement herald.Store, herald.Heartbeats,
// heraldadmin.Admin and heraldadmin.Relays; they are not a stable API of
// their own.
//
// # Partitioned outbox
//
// Config.Partition makes Migrate create the outbox table partitioned by
// range of created_at, a partition per Partitioning.Interval (a day by
// default); PartitionExisting converts a plain table that exists. Relays
// need no setting: a driver finds the layout from the table. The choices,
// and why:
//
//   - The partition key is created_at, which every row has from its
//     default: the plain-SQL contract (topic, key and payload) is
//     unchanged. PostgreSQL wants the partition key in every unique index,
//     so the primary key is (id, created_at): an id is unique within one
//     created_at, and since created_at is the inserting transaction's
//     now(), a transaction still cannot write one id twice, but two
//     transactions can (the plain table refuses it). That matters only
//     where Message.ID is set by the application (the writers otherwise
//     make a new UUIDv7): the repeat is published, and deduplication by id
//     at the broker or the consumer drops it.
//   - Maintenance runs where the relay's retention runs: DeletePublished
//     (every RelayConfig.CleanupInterval) is MaintainPartitions on a
//     partitioned table. It keeps Partitioning.Ahead partitions created
//     past the current one. A row whose created_at has no partition (a
//     time far ahead, or before the first partition) goes to the default
//     partition <table>_default rather than fail the producer's
//     transaction; when the partition of its time is created, the row
//     moves into it (a claimed row first ends its claim: an
//     acknowledgement planned before the partition existed would not find
//     it); rows of the past, or more than 64 intervals after the last
//     partition, stay in the default one.
//   - Retention drops a whole partition once its range ended Retention
//     ago and every row in it is published (Retention ago) or dead. The
//     dead ones move first to <table>_dead, which the admin lists,
//     requeues (back into the outbox, same id and seq) and discards with
//     the outbox's own: a dead letter is never lost. A partition holding a
//     ready, claimed or parked row is kept (MaintenanceReport.Kept, the
//     herald_outbox_partitions_kept metric) and its published rows are
//     deleted row by row, as are those of the default partition, so the
//     table stays bounded.
//   - Creating a partition attaches a table made beside the outbox: SHARE
//     UPDATE EXCLUSIVE on the outbox, which inserts and claims do not wait
//     for, and ACCESS EXCLUSIVE on the default partition, which is empty
//     or small. Dropping one takes ACCESS EXCLUSIVE on the outbox (DETACH
//     CONCURRENTLY is refused beside a default partition) for a few index
//     probes; maintenance waits for a lock at most a second and otherwise
//     tries again at its next run.
//   - Every partition is created with autovacuum thresholds in rows (a
//     thousand dead tuples) instead of a fifth of the table: the hot
//     partition stays small; one past its time takes no writes.
//   - A claim merges each partition's ordered probe of the ready index
//     (Merge Append); its transaction turns sorting and JIT off, so that
//     statistics that call a backlog small never make it read and sort
//     every ready row. An acknowledgement probes each partition's primary
//     key. Partitions are few: retention's intervals, the current one,
//     those ahead and the default.
//   - Later migrations run on the partitioned table as on a plain one
//     (ADD COLUMN, CREATE INDEX); Migrate gives the dead-letter table each
//     column the outbox gains, with its default.
package heraldpg

import (
	"cmp"
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
	// time (see "Partitioned outbox" in the package doc); on a
	// partitioned table, Migrate stores its Interval and Ahead for the
	// partitions created from then on. Migrate refuses it for a plain
	// table that exists already, which PartitionExisting converts. Only
	// Migrate and PartitionExisting read it: every driver finds how its
	// table is laid out from the table itself. Defaults to nil: a plain
	// table, or a partitioned one left as it is.
	Partition *Partitioning
	// DeleteAfterInsert makes the writers (NewWriter, NewSQLWriter,
	// NewExecWriter) delete the rows they insert, in the caller's
	// transaction, right after the insert: the zero-bloat mode, only for
	// a table relayed by `herald relay --source cdc`. That relay reads
	// each insert from the write-ahead log, which keeps it, so the row
	// itself is not needed; an event that fails to publish is written
	// back by the relay (same id, seq and created_at) and retried from
	// the table. Only rows inserted as streamed are deleted: while the
	// table's inserts default to ready (polling relays; before the switch
	// to change-data-capture, or after `herald source poll`) the rows
	// stay for the claims. What operators lose: the table keeps no
	// streamed history, so herald status and the admin page show only
	// the events that failed; a Reader (heraldtest.RequireWrittenTx)
	// finds none of a transaction's events; and a row the relay cannot
	// read (written by plain SQL) leaves no dead letter. The delete is a
	// second statement, in the insert's round trip on pgx, a round trip
	// of its own on database/sql. The driver (New, NewSQL) does not read
	// it. Defaults to false: rows stay, as streamed history, until
	// retention.
	DeleteAfterInsert bool
	// EmitMessages makes the writers (NewWriter, NewSQLWriter,
	// NewExecWriter) write no row at all: each message becomes a
	// transactional logical decoding message,
	// pg_logical_emit_message(true, 'herald.event:<schema>.<table>', <the
	// event as JSON>), in the caller's transaction, which a relay of
	// `herald relay --source cdc` on this table reads from the
	// write-ahead log at the transaction's commit, in commit order with
	// its other changes, and never if it rolls back. The table-less
	// mode: only for a table relayed that way, on PostgreSQL 14 or later
	// (pgoutput's messages option). The messages of one WriteTx are one
	// statement, emitted in the order given. While the
	// table's inserts default to ready (polling relays; before the switch
	// to change-data-capture, or after `herald source poll`) that
	// statement emits nothing and the writer inserts the rows with a
	// second one, for the claims, since no relay would read the messages. Each message carries a seq drawn from the
	// table's sequence, as an insert would: an event that fails to
	// publish is written back by the relay as a row with that seq, in
	// its place among its key's events, and retried from the table.
	// What operators lose, as with DeleteAfterInsert: herald status and
	// the admin page show only the events that failed, a Reader
	// (heraldtest.RequireWrittenTx) finds none of a transaction's events,
	// and a message whose content is not even an event (no id or topic)
	// leaves no dead letter, only an error in the relay's log. It
	// excludes DeleteAfterInsert. The driver (New, NewSQL) does not read
	// it. Defaults to false: the writers insert rows.
	EmitMessages bool
	// ClaimRows makes the driver's ordered claims write every event they
	// take (its state, lease and token) instead of leasing its key. By
	// default an ordered claim leases each key of which it takes at least
	// LeaseMinEvents events, one row per key in the leases table
	// (<table>_leases, migration 010), and leaves the events ready: an
	// event is then written twice in its life (inserted, then
	// acknowledged) instead of three times, the difference between the
	// relay's default and its fast path in earlier versions (README,
	// "What an event costs"). herald status, the backlog and the admin
	// page count leased events as claimed. Keyless events and unordered
	// topics are claimed as rows in either mode. Every relay reads leases
	// whatever its own mode, so relays with and without it share a
	// table. Defaults to false: ordered claims lease keys.
	ClaimRows bool
	// LeaseMinEvents is the fewest events of one key an ordered
	// claim takes for the key to be leased; a key of fewer is claimed as
	// rows. A lease row is inserted, locked and deleted: for a single
	// event that is more work than writing the event, so leases pay off
	// from two events of a key in one batch (a backlog, a busy key).
	// Defaults to 2; 1 leases every key.
	LeaseMinEvents int
	// FairBy makes claims fair between the values of a key, so that one
	// value's backlog cannot hold back the events of the others: "topic",
	// "header:NAME" (the value of a header, headers->>'NAME', exactly as
	// written; events without it share the value "") or "column:NAME" (a
	// column the user added to the outbox table, as text). Each claim
	// visits the values with ready events in turn, at most 2 × the claim's
	// limit of them (64 at least), and gives each an equal share of the
	// batch, what one leaves going to the others; each key still takes its
	// events in commit order. Unordered claims go through the same walk.
	// Its probes need an index on (the key, topic, key, seq) of the ready
	// rows, which Migrate creates when FairBy is set (for "topic", the
	// table's key index serves); a claim without it fails, saying so. See
	// docs/how-the-relay-works.md, "Fair claims". Defaults to "": claims
	// walk keys in (topic, key) order, and unordered ones take the oldest
	// events first.
	FairBy string
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
		if c.EmitMessages && c.DeleteAfterInsert {
			return names{}, errors.New("heraldpg: Config.EmitMessages and Config.DeleteAfterInsert exclude each other: " +
				"a writer that emits messages inserts no row to delete")
		}
		if c.LeaseMinEvents < 0 {
			return names{}, errors.New("heraldpg: Config.LeaseMinEvents must not be negative")
		}
		if c.MaxPayloadBytes < 0 {
			return names{}, errors.New("heraldpg: Config.MaxPayloadBytes must not be negative")
		}
		if c.Partition != nil {
			if _, err := c.Partition.withDefaults(); err != nil {
				return names{}, err
			}
		}
		if _, err := parseFairBy(c.FairBy, table); err != nil {
			return names{}, err
		}
	}
	n, err := sqlstore.NewNames("heraldpg", schema, table)
	return names{n}, err
}

// eventPrefix is the prefix of the logical decoding messages that carry
// this table's events (Config.EmitMessages): herald.event: and the
// schema-qualified name, unquoted, so that the outboxes of one database
// never read each other's. driver/heraldcdc's decoder makes the same.
func (n names) eventPrefix() string { return "herald.event:" + n.Schema + "." + n.Table }

// render fills a query template's {{.Table}}, {{.Name}}, {{.Schema}} and
// the other tables' names.
func (n names) render(tmpl string) string { return n.Render(tmpl) }

// Render is sqlstore.Names.Render with the driver's own tables: the key
// leases ({{.Leases}}, migration 010).
func (n names) Render(tmpl string, extra ...string) string {
	return n.Names.Render(tmpl, append(extra, "{{.Leases}}", n.qualify(n.Table+"_leases"))...)
}

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
	// fair is Config.FairBy (nil without), with where its claims stopped
	// and whether its index was found.
	fair        *fairKey
	fairCursor  fairCursor
	fairChecked atomic.Bool
	// serialClaims sends a claim's statements one by one even on a pgx
	// pool, as on database/sql: for the benchmark that measures what
	// pipelining them saves.
	serialClaims bool
	// leaseKeys is !Config.ClaimRows: ordered claims lease keys, those of
	// which they take at least leaseMin events.
	leaseKeys bool
	leaseMin  int
	// leaseOnly are this driver's claims that hold leases and no rows.
	leaseOnly leaseOnlyClaims

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
	if cfg == nil || !cfg.ClaimRows {
		d.leaseKeys, d.leaseMin = true, 2
		if cfg != nil {
			d.leaseMin = cmp.Or(cfg.LeaseMinEvents, 2)
		}
		d.q.claimKeys, d.q.releaseClaim = d.q.claimKeysLeased, d.q.releaseClaimLeased
		d.q.publish, d.q.publishDelete = d.q.publishLeased, d.q.publishDeleteLeased
		d.q.complete, d.q.completeDelete = d.q.completeLeased, d.q.completeDeleteLeased
	}
	if cfg != nil && cfg.FairBy != "" {
		if d.fair, err = parseFairBy(cfg.FairBy, n.Table); err != nil {
			return nil, err
		}
		d.q.fairValues = n.Render(fairValuesSQL, "{{.Fair}}", d.fair.expr)
		d.q.fairWalk = n.Render(fairWalkSQL, "{{.Fair}}", d.fair.expr)
	}
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
	return d.fairIndexReady(ctx)
}

// SchemaVersion returns the outbox table's schema version (0 when it does
// not exist) and the latest this driver knows, which Migrate brings it to.
func (d *Driver) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	current, err = d.schemaVersion(ctx, d.db)
	return current, latestVersion(), err
}

// Validate checks the configuration without connecting: the schema and
// table names, the payload cap and the write modes.
func (c *Config) Validate() error {
	_, err := c.names()
	return err
}
