// Package after is docs/dual-write.md's handler with Herald: the order,
// its items and its event commit in one transaction, and a relay
// publishes the event. TestPlaceTxWritesTheEvent runs it on PostgreSQL.
package after

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type server struct {
	pool   *pgxpool.Pool
	outbox *herald.Writer[pgx.Tx] // heraldpg.NewWriter(nil)
	log    *slog.Logger
}

func (s *server) placeOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	o, err := decodeOrder(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.ID = uuid.NewString()
	payload, err := json.Marshal(o)
	if err != nil {
		http.Error(w, "the order was not placed", http.StatusInternalServerError)
		return
	}

	// One write: the order, its items and its event commit together or
	// not at all. The relay publishes the event once it has committed.
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
			o.ID, o.Customer, o.TotalCents); err != nil {
			return err
		}
		for _, it := range o.Items {
			if _, err := tx.Exec(ctx, `INSERT INTO order_items (order_id, sku, quantity) VALUES ($1, $2, $3)`,
				o.ID, it.SKU, it.Quantity); err != nil {
				return err
			}
		}
		return s.outbox.WriteTx(ctx, tx, herald.Message{
			Topic:         "orders.placed", // the NATS subject, as before
			Type:          "order.placed",
			AggregateType: "order",
			AggregateID:   o.ID,
			Payload:       payload,
		})
	})
	if err != nil {
		s.log.Error("placing an order failed", "order_id", o.ID, "err", err)
		http.Error(w, "the order was not placed", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// order is what a client posts.
type order struct {
	ID         string `json:"id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
	Items      []item `json:"items"`
}

type item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

func decodeOrder(r *http.Request) (order, error) {
	var o order
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
		return order{}, fmt.Errorf("decoding the order: %w", err)
	}
	return o, nil
}

// placeTx is placeOrder's transaction with a name, so that a test can run
// it in a transaction of its own and roll it back.
func (s *server) placeTx(ctx context.Context, tx pgx.Tx, o order) error {
	payload, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encoding order %s: %w", o.ID, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
		o.ID, o.Customer, o.TotalCents); err != nil {
		return err
	}
	for _, it := range o.Items {
		if _, err := tx.Exec(ctx, `INSERT INTO order_items (order_id, sku, quantity) VALUES ($1, $2, $3)`,
			o.ID, it.SKU, it.Quantity); err != nil {
			return err
		}
	}
	return s.outbox.WriteTx(ctx, tx, herald.Message{
		Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: o.ID, Payload: payload,
	})
}

// The service's wiring: the outbox table and the writer come from the
// driver. It needs a PostgreSQL server, so it is compiled, not run.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}

	store, _ := heraldpg.New(pool, nil)  // table public.herald_outbox
	_ = store.Migrate(ctx)               // or `herald migrate --db ...`
	outbox, _ := heraldpg.NewWriter(nil) // *herald.Writer[pgx.Tx]

	s := &server{pool: pool, outbox: outbox, log: slog.Default()}
	http.HandleFunc("POST /orders", s.placeOrder)
}

func TestPlaceTxWritesTheEvent(t *testing.T) {
	ctx := context.Background()
	schema := testenv.Schema(t)
	pcfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	pcfg.ConnConfig.RuntimeParams["search_path"] = schema // the orders tables
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, customer text NOT NULL, total_cents bigint NOT NULL);
		CREATE TABLE order_items (order_id text NOT NULL REFERENCES orders, sku text NOT NULL, quantity int NOT NULL)`)
	require.NoError(t, err)
	cfg := &heraldpg.Config{Schema: schema}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	outbox, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	s := &server{pool: pool, outbox: outbox, log: slog.Default()}
	o := order{ID: "o-1", Customer: "acme", TotalCents: 4200, Items: []item{{SKU: "mug", Quantity: 2}}}

	reader, _ := heraldpg.NewReader(cfg) // the writer's Config
	tx, _ := pool.Begin(ctx)
	defer tx.Rollback(ctx)
	require.NoError(t, s.placeTx(ctx, tx, o))
	heraldtest.RequireWrittenTx(ctx, t, reader, tx, heraldtest.Event{Topic: "orders.placed", Type: "order.placed", Key: o.ID})
}
