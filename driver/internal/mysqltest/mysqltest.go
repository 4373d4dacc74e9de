// Package mysqltest opens heraldmysql outboxes for tests, the same way for
// the driver suite's harness and for heraldmysql's own tests: a migrated
// outbox in a database of the test's own, with a business table ("orders",
// id primary key) beside it, wrapped as a heralddrivertest.Driver.
//
// The server is the one HERALD_TEST_MYSQL names (a go-sql-driver DSN,
// user:password@tcp(host:port)/dbname), by default root@tcp(127.0.0.1:3306)/test
// as .ci/run sets it up. When it cannot be reached, tests skip, or fail
// with CI=true.
package mysqltest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/internal/testenv"
)

// EnvDSN names the environment variable with the server's DSN.
const EnvDSN = testenv.EnvMySQL

// DSN returns the test server's DSN, after checking once that it answers;
// when it does not, the test skips (fails with CI=true).
func DSN(t testing.TB) string {
	t.Helper()
	return testenv.MySQL(t)
}

// Pool opens a pool on the test server, closed when t ends.
func Pool(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", DSN(t))
	require.NoError(t, err)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// Database creates a database of the test's own, dropped when t ends: the
// MySQL counterpart of a PostgreSQL schema.
func Database(t testing.TB, db *sql.DB) string {
	t.Helper()
	return testenv.MySQLDatabase(t, db)
}

// Outbox is one MySQL outbox under test.
type Outbox struct {
	Driver *heralddrivertest.Driver // for the suite and heralddrivertest.Kit
	Store  *heraldmysql.Driver
	DB     *sql.DB
	Config *heraldmysql.Config // Database always set
	Writer *herald.Writer[*sql.Tx]
}

// New migrates an outbox for cfg on db, in a fresh database (Database)
// unless cfg names one.
func New(t testing.TB, db *sql.DB, cfg heraldmysql.Config) *Outbox {
	t.Helper()
	ctx := t.Context()
	if cfg.Database == "" {
		cfg.Database = Database(t, db)
	}
	store, err := heraldmysql.New(db, &cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldmysql.NewWriter(&cfg)
	require.NoError(t, err)
	orders := "`" + cfg.Database + "`.orders"
	_, err = db.ExecContext(ctx, `CREATE TABLE `+orders+` (id VARCHAR(64) PRIMARY KEY)`)
	require.NoError(t, err)

	table := store.Table()
	d := &heralddrivertest.Driver{
		Store: store, Admin: store, MaxPayloadBytes: cfg.MaxPayloadBytes,
		Begin: heralddrivertest.BeginSQL(db, w, `INSERT INTO `+orders+` (id) VALUES (?)`),
		BusinessRows: func(ctx context.Context) ([]string, error) {
			return queryStrings(ctx, db, `SELECT id FROM `+orders)
		},
		InsertPlain: func(ctx context.Context, topic, key string, payload []byte, headers string) (string, error) {
			return insertPlain(ctx, db, table, topic, key, payload, headers)
		},
		InsertVersioned: func(ctx context.Context, topic string, payload []byte, event int64, aggregate *int64) (string, error) {
			res, err := db.ExecContext(ctx, `INSERT INTO `+table+` (topic, payload, event_version, aggregate_version)
				VALUES (?, ?, ?, ?)`, topic, payload, event, aggregate)
			if err != nil {
				return "", err
			}
			seq, err := res.LastInsertId()
			if err != nil {
				return "", err
			}
			var id string
			return id, db.QueryRowContext(ctx, `SELECT id FROM `+table+` WHERE seq = ?`, seq).Scan(&id)
		},
		Open: func(t testing.TB) herald.Store {
			s, err := heraldmysql.New(Pool(t), &cfg)
			require.NoError(t, err)
			return s
		},
		// Timestamps are DATETIME(6) in UTC (heraldmysql's migrations/001).
		// A NULL published_at stays NULL.
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			res, err := db.ExecContext(ctx, `UPDATE `+table+` SET
				created_at = created_at - INTERVAL ? MICROSECOND,
				published_at = published_at - INTERVAL ? MICROSECOND
				WHERE id = ?`, d.Microseconds(), d.Microseconds(), id)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err == nil && n != 1 {
				// A case that backdates the wrong id would test nothing.
				err = fmt.Errorf("backdating %s changed %d rows", id, n)
			}
			return err
		},
		OddRows: oddRowsFunc(db, table, tableName(cfg)),
		Ceiling: ceiling(db, table, tableName(cfg)),
	}
	return &Outbox{Driver: d, Store: store, DB: db, Config: &cfg, Writer: w}
}

// insertPlain is the README's minimal insert of a program in another
// language, with headers when given. MySQL's INSERT returns no row: the
// id is read back by the seq it was given.
func insertPlain(ctx context.Context, db *sql.DB, table, topic, key string, payload []byte, headers string) (string, error) {
	query, args := `INSERT INTO `+table+" (topic, `key`, payload) VALUES (?, ?, ?)", []any{topic, key, payload}
	if headers != "" {
		query, args = `INSERT INTO `+table+" (topic, `key`, payload, headers) VALUES (?, ?, ?, ?)",
			append(args, headers)
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return "", err
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return "", err
	}
	var id string
	return id, db.QueryRowContext(ctx, `SELECT id FROM `+table+` WHERE seq = ?`, seq).Scan(&id)
}

// tableName is the outbox table's name, unquoted.
func tableName(cfg heraldmysql.Config) string {
	if cfg.Table == "" {
		return "herald_outbox"
	}
	return cfg.Table
}

func queryStrings(ctx context.Context, db *sql.DB, query string) ([]string, error) {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}
