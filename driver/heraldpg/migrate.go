package heraldpg

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the embedded migrations in version order.
var migrations = sqlstore.LoadMigrations(migrationFiles, "migrations")

func latestVersion() int { return migrations[len(migrations)-1].Version }

// Migrate creates or upgrades the outbox table. It runs in one transaction
// under an advisory lock keyed by the table's name, so several processes may
// migrate at once: one applies, the others then find nothing to do. It
// refuses a table whose schema is newer than this driver knows. With
// Config.FairBy set, it creates the index fair claims need, in the same
// transaction (CREATE INDEX: it holds back writes to the table while it
// reads the table once).
func (d *Driver) Migrate(ctx context.Context) error { return d.migrate(ctx, migrations) }

// MigrationSQL returns the SQL that Migrate runs to bring an outbox table
// from schema version from (0: no table) to the latest, as one script for
// teams that apply migrations with their own tool (goose, Flyway, Atlas):
// each migration followed by the row that records it, so that Herald sees
// the table at the version it expects. The script is one transaction
// (BEGIN ... COMMIT; a tool that wraps each file in its own transaction
// can drop those two lines). Unlike Migrate, it takes no advisory lock:
// the tool serializes its own runs. With cfg.FairBy set, the index fair
// claims need follows the script, as a statement of its own.
func MigrationSQL(cfg *Config, from int) (string, error) {
	n, err := cfg.names()
	if err != nil {
		return "", err
	}
	script, err := sqlstore.MigrationScript(n.Qualified, n.Migrations, "BEGIN",
		[]string{`CREATE SCHEMA IF NOT EXISTS "` + n.Schema + `"`, createMigrationsSQL(n)}, migrations, from, n.render)
	if err != nil {
		return "", fmt.Errorf("heraldpg: %w", err)
	}
	if cfg != nil {
		f, err := parseFairBy(cfg.FairBy, n.Table)
		if err != nil {
			return "", err
		}
		if f != nil && f.index != "" {
			script += "\n-- The index of claims fair by " + f.by + " (Config.FairBy, herald migrate --fair-by).\n" +
				"-- On a plain table, CREATE INDEX CONCURRENTLY (outside a transaction) builds it without holding back writes.\n" +
				f.indexSQL(n) + ";\n"
		}
	}
	return script, nil
}

func createMigrationsSQL(n names) string {
	return `CREATE TABLE IF NOT EXISTS ` + n.Migrations + ` (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`
}

// migrateIdleTimeout is the idle timeout of the migration's transaction in
// place of the relay's second (txIdleTimeout): a migration is many round
// trips, and a client that is starved of CPU for a second between two of
// them (a throttled container, a loaded machine) lost the session and the
// migration with it. A migrate cut off still gives up its locks, which
// hold back producers, within seconds.
const migrateIdleTimeout = `SET LOCAL idle_in_transaction_session_timeout = '10s'`

// migrate applies ms, a prefix of migrations: all of them but in tests of
// a migration on an older table.
func (d *Driver) migrate(ctx context.Context, ms []sqlstore.Migration) error {
	err := d.db.inTxSet(ctx, migrateIdleTimeout, func(tx conn) error {
		if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "herald:"+d.names.Qualified); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		stmts := []string{
			`CREATE SCHEMA IF NOT EXISTS "` + d.names.Schema + `"`,
			createMigrationsSQL(d.names),
		}
		for _, s := range stmts {
			if _, err := tx.exec(ctx, s); err != nil {
				return err
			}
		}
		current, err := d.schemaVersion(ctx, tx)
		if err != nil {
			return err
		}
		err = sqlstore.ApplyMigrations(ctx, d.names.Qualified, ms, current, d.names.render,
			`INSERT INTO `+d.names.Migrations+` (version, name) VALUES ($1, $2)`,
			func(ctx context.Context, sql string, args ...any) error {
				_, err := tx.exec(ctx, sql, args...)
				return err
			})
		if err != nil {
			return err
		}
		if err := d.afterMigrations(ctx, tx, current); err != nil {
			return err
		}
		return d.createFairIndex(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("heraldpg: migrate: %w", err)
	}
	// A partitioned table gets its partitions ahead now, before any relay
	// runs its maintenance.
	if l, err := d.layout(ctx, d.db); err != nil {
		return err
	} else if l.partitioned {
		if _, err := d.maintain(ctx, time.Time{}, -1, 0); err != nil {
			return fmt.Errorf("heraldpg: migrate: creating partitions ahead: %w", err)
		}
	}
	return nil
}

// schemaVersion returns the highest applied migration, 0 when none.
func (d *Driver) schemaVersion(ctx context.Context, c conn) (int, error) {
	var v int
	err := queryRow(ctx, c, `SELECT coalesce(max(version), 0) FROM `+d.names.Migrations, nil, &v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("heraldpg: reading schema version: %w", err)
	}
	return v, nil
}
