package faultsuite_test

import (
	"context"
	"database/sql"
	"io"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/internal/testenv"
)

// newMySQLWorld builds a world on the shared MySQL (or MariaDB) server, in
// a database of its own: the outbox, the business table and the broker of
// every world, for the cases that run on every database.
func newMySQLWorld(t *testing.T) *world {
	t.Helper()
	ctx := t.Context()
	dsn := testenv.MySQL(t)
	db, err := sql.Open("mysql", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	database := testenv.MySQLDatabase(t, db)
	cfg := &heraldmysql.Config{Database: database}
	store, err := heraldmysql.New(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	writer, err := heraldmysql.NewWriter(cfg)
	require.NoError(t, err)
	orders := "`" + database + "`.orders"
	_, err = db.ExecContext(ctx, `CREATE TABLE `+orders+" (id VARCHAR(64) PRIMARY KEY, `key` VARCHAR(64) NOT NULL)")
	require.NoError(t, err)

	w := &world{ledger: ledger{committedAt: map[string]time.Time{}}}
	w.db = &mysqlDB{dsn: dsn, db: db, cfg: cfg, table: store.Table(), writer: writer, orders: orders}
	w.startBroker(t)
	return w
}

// mysqlDB is a MySQL world's outboxDB.
type mysqlDB struct {
	dsn    string
	db     *sql.DB // the test's own view, never through a proxy
	cfg    *heraldmysql.Config
	table  string
	writer *herald.Writer[*sql.Tx]
	orders string
}

func (m *mysqlDB) orderTx(ctx context.Context, rollback bool, fn func(write func(id, key string) (herald.Message, error)) error) error {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = fn(func(id, key string) (herald.Message, error) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+m.orders+" (id, `key`) VALUES (?, ?)", id, key); err != nil {
			return herald.Message{}, err
		}
		msg := message(id, key)
		return msg, m.writer.WriteTx(ctx, tx, msg)
	})
	if err != nil || rollback {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func (m *mysqlDB) states(ctx context.Context, foreign []string) (total, ready, claimed, dead int, err error) {
	query := `SELECT COUNT(*), COALESCE(SUM(state = 'ready'), 0), COALESCE(SUM(state = 'claimed'), 0),
		COALESCE(SUM(state = 'dead'), 0) FROM ` + m.table
	args := make([]any, len(foreign))
	if len(foreign) > 0 {
		query += ` WHERE id NOT IN (?` + strings.Repeat(", ?", len(foreign)-1) + `)`
		for i, id := range foreign {
			args[i] = id
		}
	}
	err = m.db.QueryRowContext(ctx, query, args...).Scan(&total, &ready, &claimed, &dead)
	return total, ready, claimed, dead, err
}

func (m *mysqlDB) published(ctx context.Context) (int, error) {
	var n int
	err := m.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+m.table+` WHERE state = 'published'`).Scan(&n)
	return n, err
}

func (m *mysqlDB) outboxRows(ctx context.Context) ([]outboxRow, error) {
	rows, err := m.db.QueryContext(ctx, "SELECT id, `key`, aggregate_id, state, seq FROM "+m.table+" ORDER BY seq")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var o outboxRow
		if err := rows.Scan(&o.id, &o.key, &o.aggregateID, &o.state, &o.seq); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

func (m *mysqlDB) businessRows(ctx context.Context) ([]string, error) {
	rows, err := m.db.QueryContext(ctx, `SELECT id FROM `+m.orders)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

func (m *mysqlDB) addr(t *testing.T) string {
	t.Helper()
	c, err := mysql.ParseDSN(m.dsn)
	require.NoError(t, err)
	return c.Addr
}

// relayStore opens a pool of the relay's own, with a dial that gives up.
func (m *mysqlDB) relayStore(t *testing.T, name, addr string) herald.Store {
	t.Helper()
	c, err := mysql.ParseDSN(m.dsn)
	require.NoError(t, err)
	if addr != "" {
		c.Addr = addr
	}
	c.Timeout = 2 * time.Second
	// The driver's own log would print every reset connection.
	c.Logger = mysql.Logger(log.New(io.Discard, "", 0))
	connector, err := mysql.NewConnector(c)
	require.NoError(t, err)
	db := sql.OpenDB(connector)
	// database/sql keeps two idle connections unless told: the relay's
	// claims and acknowledgements would open a connection for nearly
	// every statement.
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := heraldmysql.New(db, m.cfg)
	require.NoError(t, err)
	return store
}
