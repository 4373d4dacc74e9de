// Package sqlx_test shows Herald with sqlx (github.com/jmoiron/sqlx), on
// PostgreSQL through pgx's database/sql driver and on SQLite: the order
// and its event are written in one sqlx transaction. *sqlx.Tx embeds the
// *sql.Tx that Herald's writers join, so no adapter is needed.
package sqlx_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/examples/orm/internal/ormtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type Order struct {
	ID         string `db:"id"`
	Customer   string `db:"customer"`
	TotalCents int64  `db:"total_cents"`
}

// placeOrder saves o and its order.placed event as part of tx: they
// commit, or roll back, together.
func placeOrder(ctx context.Context, tx *sqlx.Tx, outbox *herald.Writer[*sql.Tx], o Order) error {
	_, err := tx.NamedExecContext(ctx,
		`INSERT INTO orders (id, customer, total_cents) VALUES (:id, :customer, :total_cents)`, o)
	if err != nil {
		return fmt.Errorf("saving order %s: %w", o.ID, err)
	}
	return outbox.WriteTx(ctx, tx.Tx, herald.Message{
		Topic:         "orders",
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   o.ID,
		Payload:       fmt.Appendf(nil, `{"customer":%q,"total_cents":%d}`, o.Customer, o.TotalCents),
	})
}

// shop is a database with the outbox and an orders table.
type shop struct {
	db     *sqlx.DB
	outbox *herald.Writer[*sql.Tx]
	table  string // the outbox table, as SQL names it
}

const createOrders = `CREATE TABLE orders (id text PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL)`

func postgresShop(t *testing.T) *shop {
	dsn, schema := ormtest.PostgresDSN(t)
	db, err := sqlx.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	cfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.NewSQL(db.DB, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(t.Context()))
	outbox, err := heraldpg.NewSQLWriter(cfg)
	require.NoError(t, err)
	db.MustExec(createOrders)
	return &shop{db: db, outbox: outbox, table: store.Table()}
}

func sqliteShop(t *testing.T) *shop {
	raw, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, raw.Close()) })
	// modernc.org/sqlite registers "sqlite"; sqlx knows its ? placeholders
	// under the name "sqlite3".
	db := sqlx.NewDb(raw, "sqlite3")

	store, err := heraldsqlite.New(raw, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(t.Context()))
	outbox, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	db.MustExec(createOrders)
	return &shop{db: db, outbox: outbox, table: store.Table()}
}

func TestPostgreSQL(t *testing.T) {
	t.Parallel()
	testOrders(t, postgresShop)
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	testOrders(t, sqliteShop)
}

func testOrders(t *testing.T, newShop func(*testing.T) *shop) {
	ctx := context.Background()
	order := Order{ID: "order-1", Customer: "Ada", TotalCents: 4200}

	t.Run("CommitWritesTheOrderAndItsEvent", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		tx, err := s.db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback() // a no-op once committed
		require.NoError(t, placeOrder(ctx, tx, s.outbox, order))
		require.NoError(t, tx.Commit())

		var orders []Order
		require.NoError(t, s.db.SelectContext(ctx, &orders, `SELECT id, customer, total_cents FROM orders`))
		require.Equal(t, []Order{order}, orders)
		require.Equal(t, []ormtest.Event{{Topic: "orders", Type: "order.placed", AggregateID: "order-1",
			Payload: `{"customer":"Ada","total_cents":4200}`}}, ormtest.Events(t, s.db.DB, s.table))
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		tx, err := s.db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		require.NoError(t, placeOrder(ctx, tx, s.outbox, order))
		// Both rows exist inside the transaction...
		var n int
		require.NoError(t, tx.GetContext(ctx, &n, `SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM `+s.table+`)`))
		require.Equal(t, 2, n)
		// ...until a later step fails and the application rolls back.
		require.NoError(t, tx.Rollback())

		var orders []Order
		require.NoError(t, s.db.SelectContext(ctx, &orders, `SELECT id, customer, total_cents FROM orders`))
		require.Empty(t, orders)
		require.Empty(t, ormtest.Events(t, s.db.DB, s.table))
	})
}
