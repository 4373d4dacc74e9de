package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldspec"
)

// outbox is an opened outbox table on either database: the relay's store
// and the operators' admin.
type outbox interface {
	herald.Store
	heraldadmin.Admin
	heraldadmin.Published
	Table() string
	SchemaVersion(ctx context.Context) (current, latest int, err error)
}

// dbFlags are the flags of every command that opens the outbox table.
type dbFlags struct {
	db, schema, table, logFormat, logLevel, config *string
}

func addDBFlags(f *flagSet) *dbFlags {
	return &dbFlags{
		db:        f.String("db", "", "database `DSN`: postgres://user:password@host:5432/db?sslmode=..., mysql://user:password@host:3306/db or sqlite:path/to/file.db (required)"),
		schema:    f.String("schema", "public", "`schema` of the outbox table (PostgreSQL only)"),
		table:     f.String("table", "herald_outbox", "`name` of the outbox table"),
		logFormat: f.String("log-format", "text", "log format on stderr: `text|json`"),
		logLevel:  f.String("log-level", "info", "log level: `debug|info|warn|error`"),
		config: f.String("config", "", "a configuration `FILE` (YAML): databases, destinations, routes and settings; "+
			"flags and HERALD_* variables override it (herald config reference lists its keys)"),
	}
}

// logger builds the logger the flags ask for. Logs go to stderr, through
// the redactor; the libraries' own logs go to it too (liblogs.go).
func (d *dbFlags) logger(inv *invocation) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(*d.logLevel) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, usagef("%s: %q is not one of debug, info, warn, error", inv.flags.label("log-level"), *d.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	var log *slog.Logger
	switch strings.ToLower(*d.logFormat) {
	case "text":
		log = slog.New(slog.NewTextHandler(inv.stderr, opts))
	case "json":
		log = slog.New(slog.NewJSONHandler(inv.stderr, opts))
	default:
		return nil, usagef("%s: %q is not text or json", inv.flags.label("log-format"), *d.logFormat)
	}
	setLibraryLogger(log)
	return log, nil
}

// database is a parsed, not yet connected, database: PostgreSQL, SQLite
// or MySQL, as heraldspec parsed its DSN.
type database struct {
	spec *heraldspec.ParsedDatabase // nil for migrate --print-sql without --db
	// names is the PostgreSQL outbox's Config, which the relay's and
	// migrate's flags complete before Open (it is spec's); nil on the
	// other databases.
	names *heraldpg.Config
	where string // user@host:port/db or the file, for messages
}

// connectTimeout bounds the first connection, so that an unreachable
// database is reported instead of waited for.
const connectTimeout = 10 * time.Second

// parseDB checks --db and the table names without connecting; a SQLite
// file must exist unless create. Every error is bad input; none carries
// the password.
func (d *dbFlags) parseDB(inv *invocation, create bool) (*database, error) {
	raw := strings.TrimSpace(*d.db)
	if raw == "" {
		return nil, usagef("--db (or HERALD_DB) is required: a postgres://user:password@host:5432/db DSN")
	}
	inv.stderr.add(heraldspec.UserinfoSecrets(raw, false)...)
	inv.stderr.add(heraldspec.DSNSecrets(raw)...)
	spec := heraldspec.Database{DSN: raw, Schema: *d.schema, Table: *d.table, Create: create, ConnectTimeout: connectTimeout}
	p, err := heraldspec.ParseDatabase(spec)
	if err != nil {
		return nil, dbUsage(inv, spec, err)
	}
	inv.stderr.add(p.Secrets()...)
	db := &database{spec: p, where: p.Display()}
	if t, ok := p.Target().(*heraldpg.DSNConfig); ok {
		db.names = &t.Config
	}
	return db, nil
}

// dbWording turns the names heraldspec gives a database's fields into the
// flags that set them.
func dbWording(inv *invocation) *strings.Replacer {
	return strings.NewReplacer("Database.Schema", inv.flags.label("schema"), "Database.Table", inv.flags.label("table"),
		"Database.DSN", inv.flags.label("db"), "the DSN's path", "--db's path")
}

// dbUsage words a heraldspec.ParseDatabase error for the command line:
// after the flag (or variable) of the field that is wrong.
func dbUsage(inv *invocation, spec heraldspec.Database, err error) error {
	label := inv.flags.label("db")
	var (
		de   *heraldspec.DatabaseError
		form *heraldspec.DSNFormError
	)
	switch {
	case !errors.As(err, &de):
		return usagef("%s: %s", label, inv.stderr.scrub(err.Error()))
	case errors.As(err, &form) && form.Scheme == "":
		return usagef("%s: not a postgres://, postgresql:// or mysql:// URL, a host=... user=... connection string, nor sqlite:path", label)
	case errors.As(err, &form):
		return usagef("%s: scheme %q is not supported: use postgres://, postgresql://, mysql:// or sqlite:path", label, form.Scheme)
	case errors.Is(err, fs.ErrNotExist):
		// A SQLite file: opening it would create an empty database, and
		// a mistyped path would go unnoticed. Only herald migrate (and
		// the demo) create one.
		spec.Create = true
		if p, perr := heraldspec.ParseDatabase(spec); perr == nil {
			return usagef("%s: SQLite database %s does not exist; herald migrate --db sqlite:%s creates it",
				label, p.Display(), p.Display())
		}
	}
	switch de.Field {
	case "Schema":
		label = inv.flags.label("schema")
	case "Table":
		label = inv.flags.label("table")
	}
	return usagef("%s: %s", label, inv.stderr.scrub(dbWording(inv).Replace(de.Reason())))
}

// parsePostgresNames checks the PostgreSQL table names, --schema and
// --table: a database with no connection configured, which is enough to
// print its migrations.
func (d *dbFlags) parsePostgresNames(inv *invocation) (*database, error) {
	names := &heraldpg.Config{Schema: *d.schema, Table: *d.table}
	if err := names.Validate(); err != nil {
		return nil, usagef("%s", strings.NewReplacer(
			"heraldpg: Config.Schema", inv.flags.label("schema"),
			"heraldpg: Config.Table", inv.flags.label("table")).Replace(err.Error()))
	}
	return &database{names: names}, nil
}

// connect opens the database and checks it answers. The caller closes it.
func (db *database) connect(ctx context.Context) (*heraldspec.Outbox, outbox, error) {
	return db.opened(db.spec.Open(ctx))
}

// open opens the database without waiting for it: a pool connects on
// first use. The caller closes it.
func (db *database) open(ctx context.Context) (*heraldspec.Outbox, outbox, error) {
	return db.opened(db.spec.OpenPool(ctx))
}

// opened is an opened database's store as the commands use it: every
// driver's is an outbox.
func (db *database) opened(o *heraldspec.Outbox, err error) (*heraldspec.Outbox, outbox, error) {
	if err != nil {
		return nil, nil, err
	}
	store, ok := o.Store.(outbox)
	if !ok {
		o.Close()
		return nil, nil, fmt.Errorf("the %s driver's store has no admin of the outbox table", db.spec.Driver)
	}
	return o, store, nil
}

// open parses the flags, connects, and checks the outbox table is migrated
// to the version this herald knows.
func (d *dbFlags) open(ctx context.Context, inv *invocation) (*heraldspec.Outbox, outbox, error) {
	if _, err := d.logger(inv); err != nil {
		return nil, nil, err
	}
	db, err := d.parseDB(inv, false)
	if err != nil {
		return nil, nil, err
	}
	pool, driver, err := db.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := driver.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, driver, nil
}

func noArgs(inv *invocation) error {
	if len(inv.args) > 0 {
		return usagef("herald %s takes no arguments, got %q", strings.TrimPrefix(inv.flags.fs.Name(), "herald "), inv.args[0])
	}
	return nil
}
