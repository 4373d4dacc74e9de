package heraldsqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"fmt"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the embedded migrations in version order.
var migrations = sqlstore.LoadMigrations(migrationFiles, "migrations")

func latestVersion() int { return migrations[len(migrations)-1].Version }

const (
	createMigrationsSQL = `CREATE TABLE IF NOT EXISTS {{.Migrations}} (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL DEFAULT ({{.Now}}))`
	recordMigrationSQL = `INSERT INTO {{.Migrations}} (version, name) VALUES (?1, ?2)`
	tableExistsSQL     = `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1`
	schemaVersionSQL   = `SELECT coalesce(max(version), 0) FROM {{.Migrations}}`
)

// Migrate creates or upgrades the outbox table. It runs in one BEGIN
// IMMEDIATE transaction, which holds the database's write lock from the
// start: several processes may migrate at once, one applies and the others
// then find nothing to do (SQLite's stand-in for PostgreSQL's advisory
// lock). It refuses a table whose schema is newer than this driver knows.
//
// The transaction is begun by hand on one connection, so that it is
// immediate whatever the *sql.DB's _txlock setting.
func (d *Driver) Migrate(ctx context.Context) error {
	if err := d.migrate(ctx, migrations); err != nil {
		return fmt.Errorf("heraldsqlite: migrate: %w", err)
	}
	return nil
}

// MigrationSQL returns the SQL that Migrate runs to bring an outbox table
// from schema version from (0: no table) to the latest, as one script for
// teams that apply migrations with their own tool: each migration followed
// by the row that records it, so that Herald sees the table at the version
// it expects. The script is one transaction (BEGIN IMMEDIATE ... COMMIT; a
// tool that wraps each file in its own transaction can drop those lines).
func MigrationSQL(cfg *Config, from int) (string, error) {
	n, err := cfg.names()
	if err != nil {
		return "", err
	}
	script, err := sqlstore.MigrationScript(n.Qualified, n.Migrations, "BEGIN IMMEDIATE",
		[]string{n.render(createMigrationsSQL)}, migrations, from, n.render)
	if err != nil {
		return "", fmt.Errorf("heraldsqlite: %w", err)
	}
	return script, nil
}

// SchemaVersion returns the outbox table's schema version (0 when it does
// not exist) and the latest this driver knows, which Migrate brings it to.
func (d *Driver) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	current, err = d.schemaVersion(ctx, d.db)
	return current, migrations[len(migrations)-1].Version, err
}

// migrate applies ms, a prefix of migrations: all of them but in tests of
// a migration on an older table.
func (d *Driver) migrate(ctx context.Context, ms []sqlstore.Migration) (err error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("taking the write lock: %w", err)
	}
	defer func() {
		if err == nil {
			if _, err = c.ExecContext(ctx, `COMMIT`); err == nil {
				return
			}
			err = fmt.Errorf("committing: %w", err)
		}
		// Rolled back even when ctx ended: the connection goes back to the
		// pool and must not carry an open transaction with it. If even
		// that fails, the connection is thrown away.
		if _, rbErr := c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); rbErr != nil {
			_ = c.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	if _, err := c.ExecContext(ctx, d.names.render(createMigrationsSQL)); err != nil {
		return err
	}
	current, err := d.schemaVersion(ctx, c)
	if err != nil {
		return err
	}
	return sqlstore.ApplyMigrations(ctx, d.names.Qualified, ms, current, d.names.render,
		d.names.render(recordMigrationSQL), func(ctx context.Context, sql string, args ...any) error {
			_, err := c.ExecContext(ctx, sql, args...)
			return err
		})
}

// querier is what a *sql.DB and a *sql.Conn have in common.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// schemaVersion returns the highest applied migration, 0 when none.
func (d *Driver) schemaVersion(ctx context.Context, q querier) (int, error) {
	var exists, v int
	err := q.QueryRowContext(ctx, tableExistsSQL, d.names.Table+"_migrations").Scan(&exists)
	if err == nil && exists > 0 {
		err = q.QueryRowContext(ctx, d.names.render(schemaVersionSQL)).Scan(&v)
	}
	if err != nil {
		return 0, fmt.Errorf("heraldsqlite: reading schema version: %w", err)
	}
	return v, nil
}
