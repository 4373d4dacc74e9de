// Package ent_test shows Herald with ent (entgo.io/ent), on PostgreSQL
// through pgx's database/sql driver and on SQLite: the order and its event
// are written in one ent transaction. Generated with the sql/execquery
// feature (see ent/generate.go), *ent.Tx has an ExecContext method, through
// which the writer of heraldpg.NewExecWriter or heraldsqlite.NewExecWriter
// joins it.
package ent_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/examples/orm/ent/ent"
	"github.com/herald-outbox/herald/examples/orm/ent/ent/order"
	"github.com/herald-outbox/herald/examples/orm/internal/ormtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// placeOrder saves an order and its order.placed event as part of tx: they
// commit, or roll back, together. heraldpg.Execer and heraldsqlite.Execer
// are the same type, so one function serves both databases.
func placeOrder(ctx context.Context, tx *ent.Tx, outbox *herald.Writer[heraldpg.Execer],
	id, customer string, totalCents int64) error {
	o, err := tx.Order.Create().SetID(id).SetCustomer(customer).SetTotalCents(totalCents).Save(ctx)
	if err != nil {
		return fmt.Errorf("saving order %s: %w", id, err)
	}
	return outbox.WriteTx(ctx, tx, orderPlaced(o))
}

func orderPlaced(o *ent.Order) herald.Message {
	return herald.Message{
		Topic:         "orders",
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   o.ID,
		Payload:       fmt.Appendf(nil, `{"customer":%q,"total_cents":%d}`, o.Customer, o.TotalCents),
	}
}

// withTx runs fn in a transaction of client: committed when fn returns
// nil, rolled back when it fails or panics.
func withTx(ctx context.Context, client *ent.Client, fn func(tx *ent.Tx) error) (err error) {
	tx, err := client.Tx(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer func() {
		if v := recover(); v != nil {
			_ = tx.Rollback()
			panic(v)
		}
	}()
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(); rbErr != nil {
			return errors.Join(err, fmt.Errorf("rolling back: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// shop is a database with the outbox and an orders table.
type shop struct {
	client *ent.Client
	db     *sql.DB
	outbox *herald.Writer[heraldpg.Execer]
	table  string // the outbox table, as SQL names it
}

func postgresShop(t *testing.T) *shop {
	ctx := t.Context()
	dsn, schema := ormtest.PostgresDSN(t)
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	cfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.NewSQL(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldpg.NewExecWriter(cfg)
	require.NoError(t, err)
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.Postgres, db)))
	createSchema(t, client)
	return &shop{client: client, db: db, outbox: outbox, table: store.Table()}
}

func sqliteShop(t *testing.T) *shop {
	ctx := t.Context()
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "shop.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldsqlite.NewExecWriter(nil)
	require.NoError(t, err)
	// heraldsqlite.Open turns on foreign keys, which ent's migration checks.
	client := ent.NewClient(ent.Driver(entsql.OpenDB(dialect.SQLite, db)))
	createSchema(t, client)
	return &shop{client: client, db: db, outbox: outbox, table: store.Table()}
}

// schemaMu runs ent's migrations one at a time: they set up the generated
// package's table definitions (migrate.Tables) in place, which the race
// detector reports when parallel tests migrate at once.
var schemaMu sync.Mutex

func createSchema(t *testing.T, client *ent.Client) {
	t.Helper()
	schemaMu.Lock()
	defer schemaMu.Unlock()
	require.NoError(t, client.Schema.Create(t.Context()))
}

// orders returns the committed orders as id/customer/total.
func (s *shop) orders(t *testing.T) []string {
	t.Helper()
	all, err := s.client.Order.Query().Order(order.ByID()).All(t.Context())
	require.NoError(t, err)
	out := make([]string, len(all))
	for i, o := range all {
		out[i] = fmt.Sprintf("%s/%s/%d", o.ID, o.Customer, o.TotalCents)
	}
	return out
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

	t.Run("CommitWritesTheOrderAndItsEvent", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		err := withTx(ctx, s.client, func(tx *ent.Tx) error {
			return placeOrder(ctx, tx, s.outbox, "order-1", "Ada", 4200)
		})
		require.NoError(t, err)

		require.Equal(t, []string{"order-1/Ada/4200"}, s.orders(t))
		require.Equal(t, []ormtest.Event{{Topic: "orders", Type: "order.placed", AggregateID: "order-1",
			Payload: `{"customer":"Ada","total_cents":4200}`}}, ormtest.Events(t, s.db, s.table))
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		errDeclined := errors.New("payment declined")
		err := withTx(ctx, s.client, func(tx *ent.Tx) error {
			require.NoError(t, placeOrder(ctx, tx, s.outbox, "order-1", "Ada", 4200))
			// Both rows exist inside the transaction...
			n, err := tx.Order.Query().Count(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			rows, err := tx.QueryContext(ctx, `SELECT count(*) FROM `+s.table)
			require.NoError(t, err)
			defer rows.Close()
			require.True(t, rows.Next())
			require.NoError(t, rows.Scan(&n))
			require.Equal(t, 1, n)
			// ...until a later step fails, and withTx rolls back.
			return errDeclined
		})
		require.ErrorIs(t, err, errDeclined)

		require.Empty(t, s.orders(t))
		require.Empty(t, ormtest.Events(t, s.db, s.table))
	})

	// With sql/execquery the Client has ExecContext too; passing it where
	// tx was meant would write the event outside the transaction: refused.
	t.Run("TheClientOutsideTheTransactionIsRefused", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		err := withTx(ctx, s.client, func(tx *ent.Tx) error {
			o, err := tx.Order.Create().SetID("order-1").SetCustomer("Ada").SetTotalCents(4200).Save(ctx)
			if err != nil {
				return err
			}
			return s.outbox.WriteTx(ctx, s.client, orderPlaced(o))
		})
		require.ErrorContains(t, err, "*ent.Client is not a transaction")

		require.Empty(t, s.orders(t))
		require.Empty(t, ormtest.Events(t, s.db, s.table))
	})
}
