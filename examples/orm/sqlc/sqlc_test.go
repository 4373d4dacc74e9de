// Package sqlc_test shows Herald with sqlc (sqlc.dev) on PostgreSQL over
// pgx: the order, saved by a query sqlc generated, and its event are
// written in one pgx transaction. sqlc's Queries.WithTx takes the pgx.Tx,
// and heraldpg.NewWriter's writer joins the same pgx.Tx.
//
// The package shopdb is sqlc's output for schema.sql and query.sql,
// committed; regenerate it with go generate.
package sqlc_test

//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/examples/orm/internal/ormtest"
	"github.com/herald-outbox/herald/examples/orm/sqlc/shopdb"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// placeOrder saves an order and its order.placed event as part of tx: they
// commit, or roll back, together.
func placeOrder(ctx context.Context, tx pgx.Tx, queries *shopdb.Queries, outbox *herald.Writer[pgx.Tx],
	p shopdb.CreateOrderParams) error {
	o, err := queries.WithTx(tx).CreateOrder(ctx, p)
	if err != nil {
		return fmt.Errorf("saving order %s: %w", p.ID, err)
	}
	return outbox.WriteTx(ctx, tx, herald.Message{
		Topic:         "orders",
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   o.ID,
		Payload:       fmt.Appendf(nil, `{"customer":%q,"total_cents":%d}`, o.Customer, o.TotalCents),
	})
}

//go:embed schema.sql
var schemaSQL string

// shop is a database with the outbox and an orders table.
type shop struct {
	pool    *pgxpool.Pool
	queries *shopdb.Queries
	outbox  *herald.Writer[pgx.Tx]
	table   string // the outbox table, as SQL names it
}

func newShop(t *testing.T) *shop {
	ctx := t.Context()
	dsn, schema := ormtest.PostgresDSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	cfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, schemaSQL)
	require.NoError(t, err)
	return &shop{pool: pool, queries: shopdb.New(pool), outbox: outbox, table: store.Table()}
}

func (s *shop) events(t *testing.T) []ormtest.Event {
	t.Helper()
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	return ormtest.Events(t, db, s.table)
}

var params = shopdb.CreateOrderParams{ID: "order-1", Customer: "Ada", TotalCents: 4200}

func TestOrders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitWritesTheOrderAndItsEvent", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			return placeOrder(ctx, tx, s.queries, s.outbox, params)
		})
		require.NoError(t, err)

		orders, err := s.queries.ListOrders(ctx)
		require.NoError(t, err)
		require.Equal(t, []shopdb.Order{{ID: "order-1", Customer: "Ada", TotalCents: 4200}}, orders)
		require.Equal(t, []ormtest.Event{{Topic: "orders", Type: "order.placed", AggregateID: "order-1",
			Payload: `{"customer":"Ada","total_cents":4200}`}}, s.events(t))
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		s := newShop(t)
		errDeclined := errors.New("payment declined")
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			require.NoError(t, placeOrder(ctx, tx, s.queries, s.outbox, params))
			// Both rows exist inside the transaction...
			n, err := s.queries.WithTx(tx).CountOrders(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(1), n)
			require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM `+s.table).Scan(&n))
			require.Equal(t, int64(1), n)
			// ...until a later step fails, and BeginFunc rolls back.
			return errDeclined
		})
		require.ErrorIs(t, err, errDeclined)

		orders, err := s.queries.ListOrders(ctx)
		require.NoError(t, err)
		require.Empty(t, orders)
		require.Empty(t, s.events(t))
	})
}
