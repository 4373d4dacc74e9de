// Package gorm_test shows Herald with GORM (gorm.io/gorm) on PostgreSQL:
// the order and its event are written in one db.Transaction. GORM keeps
// the *sql.Tx to itself, but runs a transaction's statements on
// tx.Statement.ConnPool, which heraldpg.NewExecWriter's writer joins.
//
// GORM on SQLite is not shown: its pure-Go driver, github.com/glebarez/sqlite,
// registers the database/sql driver name "sqlite" as modernc.org/sqlite
// (Herald's SQLite driver) does, and a program that links both panics
// at start.
package gorm_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/examples/orm/internal/ormtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	// With PrepareStmt, GORM starts a goroutine that expires its cached
	// statements and never stops it.
	testenv.Main(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}

type Order struct {
	ID         string `gorm:"primaryKey"`
	Customer   string `gorm:"not null"`
	TotalCents int64  `gorm:"not null"`
}

// placeOrder saves o and its order.placed event as part of tx, a GORM
// transaction: they commit, or roll back, together.
func placeOrder(ctx context.Context, tx *gorm.DB, outbox *herald.Writer[heraldpg.Execer], o Order) error {
	if err := tx.Create(&o).Error; err != nil {
		return fmt.Errorf("saving order %s: %w", o.ID, err)
	}
	// Inside Transaction, ConnPool is the transaction GORM began (a *sql.Tx,
	// or a *gorm.PreparedStmtTX with PrepareStmt).
	return outbox.WriteTx(ctx, tx.Statement.ConnPool, orderPlaced(o))
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
	db     *gorm.DB
	outbox *herald.Writer[heraldpg.Execer]
	table  string // the outbox table, as SQL names it
}

func newShop(t *testing.T, cfg *gorm.Config) *shop {
	ctx := t.Context()
	dsn, schema := ormtest.PostgresDSN(t)
	cfg.Logger = logger.Discard
	db, err := gorm.Open(postgres.Open(dsn), cfg) // pgx's database/sql driver
	require.NoError(t, err)
	sqlDB, err := db.DB()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sqlDB.Close()) })

	hcfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.NewSQL(sqlDB, hcfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldpg.NewExecWriter(hcfg)
	require.NoError(t, err)
	require.NoError(t, db.WithContext(ctx).AutoMigrate(&Order{}))
	return &shop{db: db, outbox: outbox, table: store.Table()}
}

func (s *shop) orders(t *testing.T) []Order {
	t.Helper()
	var orders []Order
	require.NoError(t, s.db.Order("id").Find(&orders).Error)
	return orders
}

func (s *shop) events(t *testing.T) []ormtest.Event {
	t.Helper()
	sqlDB, err := s.db.DB()
	require.NoError(t, err)
	return ormtest.Events(t, sqlDB, s.table)
}

var order = Order{ID: "order-1", Customer: "Ada", TotalCents: 4200}

func TestOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	for name, cfg := range map[string]func() *gorm.Config{
		"CommitWritesTheOrderAndItsEvent":        func() *gorm.Config { return &gorm.Config{} },
		"CommitWritesBothWithPreparedStatements": func() *gorm.Config { return &gorm.Config{PrepareStmt: true} },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newShop(t, cfg())
			err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return placeOrder(ctx, tx, s.outbox, order)
			})
			require.NoError(t, err)

			require.Equal(t, []Order{order}, s.orders(t))
			require.Equal(t, []ormtest.Event{{Topic: "orders", Type: "order.placed", AggregateID: "order-1",
				Payload: `{"customer":"Ada","total_cents":4200}`}}, s.events(t))
		})
	}

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, &gorm.Config{})
		errDeclined := errors.New("payment declined")
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			require.NoError(t, placeOrder(ctx, tx, s.outbox, order))
			// Both rows exist inside the transaction...
			var n int64
			require.NoError(t, tx.Raw(`SELECT (SELECT count(*) FROM orders) + (SELECT count(*) FROM `+s.table+`)`).Scan(&n).Error)
			require.Equal(t, int64(2), n)
			// ...until a later step fails, and Transaction rolls back.
			return errDeclined
		})
		require.ErrorIs(t, err, errDeclined)

		require.Empty(t, s.orders(t))
		require.Empty(t, s.events(t))
	})

	// Passing db where tx was meant would write the event on a connection
	// of its own, committed whatever becomes of the order: refused.
	t.Run("TheDBOutsideTheTransactionIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newShop(t, &gorm.Config{})
		err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&order).Error; err != nil {
				return err
			}
			return s.outbox.WriteTx(ctx, s.db.Statement.ConnPool, orderPlaced(order))
		})
		require.ErrorContains(t, err, "*sql.DB is not a transaction")

		require.Empty(t, s.orders(t))
		require.Empty(t, s.events(t))
	})
}
