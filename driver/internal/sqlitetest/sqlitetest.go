// Package sqlitetest opens heraldsqlite outboxes for tests, the same way
// for the driver suite's harness and for heraldsqlite's own tests: a
// migrated outbox in a database file of the test's own, with a business
// table ("orders", id text primary key) beside it, wrapped as a
// heralddrivertest.Driver.
package sqlitetest

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

// Outbox is one SQLite outbox under test.
type Outbox struct {
	Driver *heralddrivertest.Driver // for the suite and heralddrivertest.Kit
	Store  *heraldsqlite.Driver
	DB     *sql.DB
	Path   string // the database file
	Config *heraldsqlite.Config
	Writer *herald.Writer[*sql.Tx]
}

// New migrates an outbox for cfg in a new database file.
func New(t testing.TB, cfg heraldsqlite.Config) *Outbox {
	t.Helper()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db := Open(t, path)
	store, err := heraldsqlite.New(db, &cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldsqlite.NewWriter(&cfg)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`)
	require.NoError(t, err)

	table := store.Table()
	d := &heralddrivertest.Driver{
		Store: store, Admin: store, MaxPayloadBytes: cfg.MaxPayloadBytes,
		Begin: heralddrivertest.BeginSQL(db, w, `INSERT INTO orders (id) VALUES (?)`),
		BusinessRows: func(ctx context.Context) ([]string, error) {
			rows, err := db.QueryContext(ctx, `SELECT id FROM orders`)
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
		},
		InsertPlain: func(ctx context.Context, topic, key string, payload []byte, headers string) (string, error) {
			query, args := `INSERT INTO `+table+` (topic, key, payload) VALUES (?, ?, ?) RETURNING id`, []any{topic, key, payload}
			if headers != "" {
				query, args = `INSERT INTO `+table+` (topic, key, payload, headers) VALUES (?, ?, ?, ?) RETURNING id`,
					append(args, headers)
			}
			var id string
			return id, db.QueryRowContext(ctx, query, args...).Scan(&id)
		},
		InsertVersioned: func(ctx context.Context, topic string, payload []byte, event int64, aggregate *int64) (string, error) {
			var id string
			return id, db.QueryRowContext(ctx, `INSERT INTO `+table+` (topic, payload, event_version, aggregate_version)
				VALUES (?, ?, ?, ?) RETURNING id`, topic, payload, event, aggregate).Scan(&id)
		},
		Open: func(t testing.TB) herald.Store {
			s, err := heraldsqlite.New(Open(t, path), &cfg)
			require.NoError(t, err)
			return s
		},
		// Timestamps are INTEGER microseconds since the Unix epoch
		// (heraldsqlite's migrations/001).
		Backdate: func(ctx context.Context, id string, d time.Duration) error {
			res, err := db.ExecContext(ctx, `UPDATE `+table+` SET
				created_at = created_at - ?2,
				published_at = published_at - ?2
				WHERE id = ?1`, id, d.Microseconds())
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
		OddRows: oddRowsFunc(db, tableName(cfg)),
		Ceiling: ceiling(db, table),
	}
	return &Outbox{Driver: d, Store: store, DB: db, Path: path, Config: &cfg, Writer: w}
}

// tableName is the outbox table's name, unquoted.
func tableName(cfg heraldsqlite.Config) string {
	if cfg.Table == "" {
		return "herald_outbox"
	}
	return cfg.Table
}

// Open opens the database file at path with heraldsqlite.Open and closes it
// when the test ends.
func Open(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := heraldsqlite.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}
