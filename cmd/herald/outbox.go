package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
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

// closer releases a database's connections.
type closer interface{ Close() }

type closerFunc func()

func (f closerFunc) Close() { f() }

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

var schemeLike = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*$`)

// database is a parsed, not yet connected, database configuration: a
// PostgreSQL pool, a SQLite file, or a MySQL pool.
type database struct {
	pool       *pgxpool.Config
	names      *heraldpg.Config
	sqlitePath string
	sqlite     *heraldsqlite.Config
	mysql      *mysql.Config
	mysqlNames *heraldmysql.Config
	where      string // user@host:port/db or the file, for messages
}

// parseDB checks --db and the table names without connecting. Every error
// is bad input; none carries the password.
func (d *dbFlags) parseDB(inv *invocation) (*database, error) {
	label := inv.flags.label("db")
	raw := strings.TrimSpace(*d.db)
	if raw == "" {
		return nil, usagef("--db (or HERALD_DB) is required: a postgres://user:password@host:5432/db DSN")
	}
	if path, ok := strings.CutPrefix(raw, "sqlite:"); ok {
		return d.parseSQLite(inv, path)
	}
	inv.stderr.add(userinfoSecrets(raw, false)...)
	scheme, _, found := strings.Cut(raw, "://")
	switch {
	case !found && keywordDSN.MatchString(raw):
		// libpq's keyword/value form, host=... user=... dbname=...
		if pw := keywordPassword.FindStringSubmatch(raw); pw != nil {
			inv.stderr.add(strings.Trim(pw[1], "'"))
		}
		return d.parsePostgres(inv, raw)
	case !found || !schemeLike.MatchString(scheme):
		return nil, usagef("%s: not a postgres://, postgresql:// or mysql:// URL, a host=... user=... connection string, nor sqlite:path", label)
	case strings.EqualFold(scheme, "mysql"):
		return d.parseMySQL(inv, "mysql"+raw[len(scheme):])
	case !strings.EqualFold(scheme, "postgres") && !strings.EqualFold(scheme, "postgresql"):
		return nil, usagef("%s: scheme %q is not supported: use postgres://, postgresql://, mysql:// or sqlite:path", label, scheme)
	}
	// pgx, like libpq, ends the user information at its first '@', and
	// sees none when a '/' comes first: the rest of a password holding a
	// bare '@' or '/' (user:p@ss@host, user:pa/ss@host) would be read as the
	// host or the database, and shown wherever pgx or Herald show those.
	if pw := userinfoSecrets(raw, false); len(pw) == 1 && strings.ContainsAny(pw[0], "@/") {
		return nil, usagef("%s: the password holds an '@' or '/' that is not percent-encoded: write them %%40 and %%2F", label)
	}
	// pgx takes the scheme in lower case only.
	return d.parsePostgres(inv, strings.ToLower(scheme)+raw[len(scheme):])
}

// keywordDSN is libpq's keyword/value connection string; keywordPassword
// finds its password, quoted or not, to keep it out of every message.
var (
	keywordDSN      = regexp.MustCompile(`^[a-z_]+\s*=`)
	keywordPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)
)

// parsePostgres parses a PostgreSQL DSN, URL or keyword/value, and the
// table names.
func (d *dbFlags) parsePostgres(inv *invocation, raw string) (*database, error) {
	label := inv.flags.label("db")
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, usagef("%s: %s", label, inv.stderr.scrub(err.Error()))
	}
	inv.stderr.add(cfg.ConnConfig.Password)
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "herald"
	}
	db, err := d.parsePostgresNames(inv)
	if err != nil {
		return nil, err
	}
	c := cfg.ConnConfig
	db.pool = cfg
	db.where = fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
	return db, nil
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

// connectTimeout bounds the first connection, so that an unreachable
// database is reported instead of waited for.
const connectTimeout = 10 * time.Second

// parseSQLite checks a sqlite:path DSN and the table name.
func (d *dbFlags) parseSQLite(inv *invocation, path string) (*database, error) {
	path = strings.TrimPrefix(path, "//")
	if path == "" {
		return nil, usagef("%s: sqlite: needs a file path, as in sqlite:path/to/file.db", inv.flags.label("db"))
	}
	if *d.schema != "public" {
		return nil, usagef("%s: SQLite has no schemas; name the table with --table", inv.flags.label("schema"))
	}
	cfg := &heraldsqlite.Config{Table: *d.table}
	if err := cfg.Validate(); err != nil {
		return nil, usagef("%s", strings.ReplaceAll(err.Error(), "heraldsqlite: Config.Table", inv.flags.label("table")))
	}
	return &database{sqlitePath: path, sqlite: cfg, where: path}, nil
}

// mustExist refuses a SQLite file that does not exist: opening it would
// create an empty database, and a mistyped path would go unnoticed. Only
// herald migrate (and the demo) create one.
func (db *database) mustExist(inv *invocation) error {
	if db.sqlite == nil {
		return nil
	}
	if _, err := os.Stat(db.sqlitePath); errors.Is(err, fs.ErrNotExist) {
		return usagef("%s: SQLite database %s does not exist; herald migrate --db sqlite:%s creates it",
			inv.flags.label("db"), db.sqlitePath, db.sqlitePath)
	}
	return nil
}

// connect opens the database and checks it answers. The caller closes it.
func (db *database) connect(ctx context.Context) (closer, outbox, error) {
	pool, driver, err := db.open()
	if err != nil {
		return nil, nil, err
	}
	if err := db.reach(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, driver, nil
}

// open opens the database without waiting for it: a PostgreSQL pool
// connects on first use. The caller closes it.
func (db *database) open() (closer, outbox, error) {
	if db.sqlite != nil {
		sdb, err := heraldsqlite.Open(db.sqlitePath)
		if err != nil {
			return nil, nil, err
		}
		driver, err := heraldsqlite.New(sdb, db.sqlite)
		if err != nil {
			sdb.Close()
			return nil, nil, err
		}
		return closerFunc(func() { sdb.Close() }), driver, nil
	}
	if db.mysql != nil {
		return db.openMySQL()
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), db.pool)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the database %s: %w", db.where, err)
	}
	driver, err := heraldpg.New(pool, db.names)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, driver, nil
}

// reach checks that the database answers, within connectTimeout.
func (db *database) reach(ctx context.Context, pool closer) error {
	p, ok := pool.(interface{ Ping(context.Context) error })
	if !ok {
		return nil // SQLite: a file
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := p.Ping(pingCtx); err != nil {
		return fmt.Errorf("cannot reach the database %s: %w", db.where, err)
	}
	return nil
}

// open parses the flags, connects, and checks the outbox table is migrated
// to the version this herald knows.
func (d *dbFlags) open(ctx context.Context, inv *invocation) (closer, outbox, error) {
	if _, err := d.logger(inv); err != nil {
		return nil, nil, err
	}
	db, err := d.parseDB(inv)
	if err != nil {
		return nil, nil, err
	}
	if err := db.mustExist(inv); err != nil {
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
