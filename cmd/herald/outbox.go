package main

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald/driver/heraldpg"
)

// dbFlags are the flags of every command that opens the outbox table.
type dbFlags struct {
	db, schema, table, logFormat, logLevel *string
}

func addDBFlags(f *flagSet) *dbFlags {
	return &dbFlags{
		db:        f.String("db", "", "PostgreSQL `DSN`: postgres://user:password@host:5432/db?sslmode=... (required)"),
		schema:    f.String("schema", "public", "`schema` of the outbox table"),
		table:     f.String("table", "herald_outbox", "`name` of the outbox table"),
		logFormat: f.String("log-format", "text", "log format on stderr: `text|json`"),
		logLevel:  f.String("log-level", "info", "log level: `debug|info|warn|error`"),
	}
}

// logger builds the logger the flags ask for. Logs go to stderr, through
// the redactor.
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
	switch strings.ToLower(*d.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(inv.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(inv.stderr, opts)), nil
	}
	return nil, usagef("%s: %q is not text or json", inv.flags.label("log-format"), *d.logFormat)
}

var schemeLike = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*$`)

// database is a parsed, not yet connected, database configuration.
type database struct {
	pool  *pgxpool.Config
	names *heraldpg.Config
	where string // user@host:port/db, for messages
}

// parseDB checks --db and the table names without connecting. Every error
// is bad input; none carries the password.
func (d *dbFlags) parseDB(inv *invocation) (*database, error) {
	label := inv.flags.label("db")
	raw := strings.TrimSpace(*d.db)
	if raw == "" {
		return nil, usagef("--db (or HERALD_DB) is required: a postgres://user:password@host:5432/db DSN")
	}
	inv.stderr.add(userinfoSecrets(raw, false)...)
	scheme, _, found := strings.Cut(raw, "://")
	switch {
	case !found || !schemeLike.MatchString(scheme):
		return nil, usagef("%s: not a postgres:// or postgresql:// URL", label)
	case !strings.EqualFold(scheme, "postgres") && !strings.EqualFold(scheme, "postgresql"):
		return nil, usagef("%s: scheme %q is not supported: use postgres:// or postgresql://", label, scheme)
	}
	// pgx takes the scheme in lower case only.
	raw = strings.ToLower(scheme) + raw[len(scheme):]
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return nil, usagef("%s: %s", label, inv.stderr.scrub(err.Error()))
	}
	inv.stderr.add(cfg.ConnConfig.Password)
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "herald"
	}
	names := &heraldpg.Config{Schema: *d.schema, Table: *d.table}
	if err := names.Validate(); err != nil {
		return nil, usagef("%s", strings.NewReplacer(
			"heraldpg: Config.Schema", inv.flags.label("schema"),
			"heraldpg: Config.Table", inv.flags.label("table")).Replace(err.Error()))
	}
	c := cfg.ConnConfig
	return &database{
		pool:  cfg,
		names: names,
		where: fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database),
	}, nil
}

// connectTimeout bounds the first connection, so that an unreachable
// database is reported instead of waited for.
const connectTimeout = 10 * time.Second

// connect opens a pool and checks the database answers. The caller closes
// the pool.
func (db *database) connect(ctx context.Context) (*pgxpool.Pool, *heraldpg.Driver, error) {
	pool, err := pgxpool.NewWithConfig(ctx, db.pool)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the database %s: %w", db.where, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("cannot reach the database %s: %w", db.where, err)
	}
	driver, err := heraldpg.New(pool, db.names)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, driver, nil
}

// open parses the flags, connects, and checks the outbox table is migrated
// to the version this herald knows.
func (d *dbFlags) open(ctx context.Context, inv *invocation) (*pgxpool.Pool, *heraldpg.Driver, error) {
	if _, err := d.logger(inv); err != nil {
		return nil, nil, err
	}
	db, err := d.parseDB(inv)
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
