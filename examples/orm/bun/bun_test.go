// Package bun_test shows Herald with Bun (github.com/uptrace/bun), on
// PostgreSQL through pgx's database/sql driver and on SQLite: the order
// and its event are written in one db.RunInTx. bun.Tx embeds the *sql.Tx
// that Herald's writers join, as tx.Tx.
package bun_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/examples/orm/internal/ormtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type Order struct {
	bun.BaseModel `bun:"table:orders"`

	ID         string `bun:"id,pk"`
	Customer   string `bun:"customer,notnull"`
	TotalCents int64  `bun:"total_cents,notnull"`
}

// placeOrder saves o and its order.placed event as part of tx: they
// commit, or roll back, together.
func placeOrder(ctx context.Context, tx bun.Tx, outbox *herald.Writer[*sql.Tx], o Order) error {
	if _, err := tx.NewInsert().Model(&o).Exec(ctx); err != nil {
		return fmt.Errorf("saving order %s: %w", o.ID, err)
	}
	// tx.Tx, not tx: bun.Tx's own ExecContext rewrites the query for bun's
	// placeholders and drops the arguments.
	return outbox.WriteTx(ctx, tx.Tx, orderPlaced(o))
}

func orderPlaced(o Order) herald.Message {
	return herald.Message{
		Topic:         "orders",
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   o.ID,
		Payload:       fmt.Appendf(nil, `{"customer":%q,"total_cents":%d}`, o.Customer, o.TotalCents),
	}
}

// shop is a database with the outbox and an orders table.
type shop struct {
	db     *bun.DB
	outbox *herald.Writer[*sql.Tx]
	table  string // the outbox table, as SQL names it
	schema string // PostgreSQL's schema of the test
}

func postgresShop(t *testing.T) *shop {
	ctx := t.Context()
	dsn, schema := ormtest.PostgresDSN(t)
	sqlDB, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	db := bun.NewDB(sqlDB, pgdialect.New())
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	cfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.NewSQL(sqlDB, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldpg.NewSQLWriter(cfg)
	require.NoError(t, err)
	_, err = db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)
	require.NoError(t, err)
	return &shop{db: db, outbox: outbox, table: store.Table(), schema: schema}
}

func sqliteShop(t *testing.T) *shop {
	ctx := t.Context()
	sqlDB, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
	require.NoError(t, err)
	db := bun.NewDB(sqlDB, sqlitedialect.New())
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	store, err := heraldsqlite.New(sqlDB, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	_, err = db.NewCreateTable().Model((*Order)(nil)).Exec(ctx)
	require.NoError(t, err)
	return &shop{db: db, outbox: outbox, table: store.Table()}
}

func (s *shop) orders(t *testing.T) []Order {
	t.Helper()
	var orders []Order
	require.NoError(t, s.db.NewSelect().Model(&orders).Order("id").Scan(t.Context()))
	return orders
}

func TestPostgreSQL(t *testing.T) {
	t.Parallel()
	testOrders(t, postgresShop)

	// A reminder of why placeOrder passes tx.Tx: bun.Tx has Commit and
	// Rollback, so an exec writer takes it, but the statement reaches
	// PostgreSQL without its arguments and fails.
	t.Run("TheBunTxItselfLosesTheArguments", func(t *testing.T) {
		t.Parallel()
		s := postgresShop(t)
		w, err := heraldpg.NewExecWriter(&heraldpg.Config{Schema: s.schema})
		require.NoError(t, err)
		err = s.db.RunInTx(t.Context(), nil, func(ctx context.Context, tx bun.Tx) error {
			return w.WriteTx(ctx, tx, orderPlaced(order))
		})
		require.ErrorContains(t, err, "there is no parameter $1")
		require.Empty(t, ormtest.Events(t, s.db.DB, s.table))
	})
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	testOrders(t, sqliteShop)
}

var order = Order{ID: "order-1", Customer: "Ada", TotalCents: 4200}

func testOrders(t *testing.T, newShop func(*testing.T) *shop) {
	ctx := context.Background()

	t.Run("CommitWritesTheOrderAndItsEvent", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return placeOrder(ctx, tx, s.outbox, order)
		})
		require.NoError(t, err)

		require.Equal(t, []Order{order}, s.orders(t))
		require.Equal(t, []ormtest.Event{{Topic: "orders", Type: "order.placed", AggregateID: "order-1",
			Payload: `{"customer":"Ada","total_cents":4200}`}}, ormtest.Events(t, s.db.DB, s.table))
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		errDeclined := errors.New("payment declined")
		err := s.db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			require.NoError(t, placeOrder(ctx, tx, s.outbox, order))
			// Both rows exist inside the transaction...
			var n int
			require.NoError(t, tx.NewRaw(`SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM `+s.table+`)`).Scan(ctx, &n))
			require.Equal(t, 2, n)
			// ...until a later step fails, and RunInTx rolls back.
			return errDeclined
		})
		require.ErrorIs(t, err, errDeclined)

		require.Empty(t, s.orders(t))
		require.Empty(t, ormtest.Events(t, s.db.DB, s.table))
	})
}
