package heraldmysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/herald-outbox/herald/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the embedded migrations in version order.
var migrations = sqlstore.LoadMigrations(migrationFiles, "migrations")

func latestVersion() int { return migrations[len(migrations)-1].Version }

const (
	createMigrationsSQL = `CREATE TABLE IF NOT EXISTS {{.Migrations}} (
		version    INT          NOT NULL PRIMARY KEY,
		name       VARCHAR(255) NOT NULL,
		applied_at DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6))
	) ENGINE = InnoDB`
	recordMigrationSQL = `INSERT INTO {{.Migrations}} (version, name) VALUES (?, ?)`
	schemaVersionSQL   = `SELECT COALESCE(MAX(version), 0) FROM {{.Migrations}}`
	// The database holding the table: Config.Database, else the
	// connection's current one (NULL when the DSN names none).
	databaseSQL    = `SELECT COALESCE(NULLIF(?, ''), DATABASE())`
	tableExistsSQL = `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?`
	getLockSQL     = `SELECT GET_LOCK(?, ?)`
	releaseLockSQL = `SELECT RELEASE_LOCK(?)`
)

// migrateLockWait is how long Migrate waits for another process's
// migration of the same table.
const migrateLockWait = 5 * time.Minute

// Migrate creates or upgrades the outbox table. MySQL commits every DDL
// statement on its own, so migrations cannot share a transaction; several
// processes migrating at once are kept apart by a named lock (GET_LOCK) on
// the table, held on one connection: one applies, the others wait for it,
// then find nothing to do. Each migration is a statement that can run
// again (CREATE TABLE IF NOT EXISTS), recorded once it ran, so a migration
// cut short is finished by the next Migrate. It refuses a table whose
// schema is newer than this driver knows.
func (d *Driver) Migrate(ctx context.Context) error {
	if err := d.migrate(ctx, migrations); err != nil {
		return fmt.Errorf("heraldmysql: migrate: %w", err)
	}
	return nil
}

// MigrationSQL returns the SQL that Migrate runs to bring cfg's table from
// schema version from (0: no table yet) to the latest, for a migration tool
// (goose, Flyway, Atlas): each migration, then the INSERT that records it.
// MySQL commits every DDL statement on its own, so the script has no
// transaction; each migration is one statement that can run again. Each
// statement ends with a semicolon at the end of its line.
func MigrationSQL(cfg *Config, from int) (string, error) {
	n, err := cfg.names()
	if err != nil {
		return "", err
	}
	latest := latestVersion()
	if from < 0 || from > latest {
		return "", fmt.Errorf("heraldmysql: MigrationSQL: version %d is not between 0 and %d", from, latest)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "-- Herald outbox table %s: schema version %d to %d.\n", n.Qualified, from, latest)
	fmt.Fprintf(&b, "%s;\n", n.render(createMigrationsSQL))
	for _, m := range migrations {
		if m.Version <= from {
			continue
		}
		fmt.Fprintf(&b, "\n-- migration %d: %s\n%s\n", m.Version, m.Name, strings.TrimSpace(n.render(m.SQL)))
		fmt.Fprintf(&b, "INSERT INTO %s (version, name) VALUES (%d, '%s');\n", n.Migrations, m.Version, m.Name)
	}
	return b.String(), nil
}

// migrate applies ms, a prefix of migrations: all of them but in tests of
// a migration on an older table.
func (d *Driver) migrate(ctx context.Context, ms []sqlstore.Migration) (err error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	database, err := d.database(ctx, c)
	if err != nil {
		return err
	}
	name := lockName("migrate", database, d.names.Table)
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, getLockSQL, name, int(migrateLockWait.Seconds())).Scan(&got); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	if got.Int64 != 1 {
		return fmt.Errorf("another process has been migrating %s for %v: its lock %s is still held", d.names.Qualified, migrateLockWait, name)
	}
	defer func() {
		// Released even when ctx ended: the connection goes back to the
		// pool and must not carry the lock with it. If even that fails,
		// the connection is thrown away, which releases it.
		var released sql.NullInt64
		if rErr := c.QueryRowContext(context.WithoutCancel(ctx), releaseLockSQL, name).Scan(&released); rErr != nil || released.Int64 != 1 {
			_ = c.Raw(func(any) error { return driver.ErrBadConn })
		}
	}()

	exec := func(ctx context.Context, query string, args ...any) error {
		_, err := c.ExecContext(ctx, query, args...)
		return err
	}
	if err := exec(ctx, d.names.render(createMigrationsSQL)); err != nil {
		return err
	}
	current, err := d.schemaVersion(ctx, c)
	if err != nil {
		return err
	}
	return sqlstore.ApplyMigrations(ctx, d.names.Qualified, ms, current, d.names.render,
		d.names.render(recordMigrationSQL), func(ctx context.Context, query string, args ...any) error {
			if len(args) > 0 {
				return exec(ctx, query, args...)
			}
			for _, st := range statements(query) {
				if err := exec(ctx, st); err != nil {
					return err
				}
			}
			return nil
		})
}

// statements splits a migration file into its statements, which
// go-sql-driver runs one at a time (unless the DSN sets multiStatements):
// each ends with a semicolon at the end of a line. Comment lines go.
func statements(script string) []string {
	var (
		out []string
		b   strings.Builder
	)
	for line := range strings.SplitSeq(script, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") {
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
		if strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(b.String()), ";"))
			b.Reset()
		}
	}
	if rest := strings.TrimSpace(b.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// lockName is the name of a named lock on table of database: GET_LOCK
// names are server-wide and at most 64 characters, so the table is
// hashed.
func lockName(what, database, table string) string {
	h := sha256.Sum256([]byte(database + "." + table))
	return "herald_" + what + "_" + hex.EncodeToString(h[:16])
}

// querier is what a *sql.DB and a *sql.Conn have in common.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// database returns the database that holds the table.
func (d *Driver) database(ctx context.Context, q querier) (string, error) {
	var database sql.NullString
	if err := q.QueryRowContext(ctx, databaseSQL, d.names.Schema).Scan(&database); err != nil {
		return "", err
	}
	if !database.Valid {
		return "", errors.New("no database: name one in the DSN (user@tcp(host:3306)/dbname) or set Config.Database")
	}
	return database.String, nil
}

// schemaVersion returns the highest applied migration, 0 when none.
func (d *Driver) schemaVersion(ctx context.Context, q querier) (int, error) {
	database, err := d.database(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: reading schema version: %w", err)
	}
	var exists, v int
	err = q.QueryRowContext(ctx, tableExistsSQL, database, d.names.Table+"_migrations").Scan(&exists)
	if err == nil && exists > 0 {
		err = q.QueryRowContext(ctx, d.names.render(schemaVersionSQL)).Scan(&v)
	}
	if err != nil {
		return 0, fmt.Errorf("heraldmysql: reading schema version: %w", err)
	}
	return v, nil
}
