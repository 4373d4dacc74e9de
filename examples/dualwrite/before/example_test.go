// Package before is docs/dual-write.md's handler before Herald: it commits
// the order, then publishes its event to JetStream, two writes that cannot
// commit together. It is compiled, not run.
package before

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

type server struct {
	pool *pgxpool.Pool
	js   jetstream.JetStream
	log  *slog.Logger
}

func (s *server) placeOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	o, err := decodeOrder(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.ID = uuid.NewString()

	// Write 1: the order and its items, in one transaction.
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
		return nil
	})
	if err != nil {
		http.Error(w, "the order was not placed", http.StatusInternalServerError)
		return
	}

	// Write 2: the event, straight to the broker.
	payload, _ := json.Marshal(o)
	if _, err := s.js.Publish(ctx, "orders.placed", payload); err != nil {
		// The order exists, the event does not. Answer 500 and the client
		// retries: a second order. Answer 201 and billing never hears of it.
		s.log.Error("publishing order.placed failed", "order_id", o.ID, "err", err)
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

// The service's wiring; placeOrder is the page's subject.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	s := &server{pool: pool, js: js, log: slog.Default()}
	http.HandleFunc("POST /orders", s.placeOrder)
}
