// Package overlap is docs/dual-write.md's migration, steps 2 and 3: the
// consumer made idempotent by the inbox, and the handler that writes its
// event in the transaction while it still publishes directly, both copies
// carrying one id. It needs PostgreSQL and NATS, so it is compiled, not run.
package overlap

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// billing is the consumer of orders.placed.
type billing struct {
	pool  *pgxpool.Pool
	inbox *heraldinbox.Inbox
	log   *slog.Logger
}

func (b *billing) receive(ctx context.Context, msg jetstream.Msg) error {
	ev, err := heraldnats.ParseJetStream(msg)
	if errors.Is(err, heraldnats.ErrNotHerald) {
		// From a producer not yet upgraded: it wrote no outbox event, so
		// no second copy will follow. Handle it as before.
		return b.invoiceAsBefore(ctx, msg.Data())
	}
	if err != nil {
		return err
	}
	processed, err := b.inbox.ProcessPgx(ctx, b.pool, "billing", ev.ID, func(ctx context.Context, tx pgx.Tx) error {
		return b.invoice(ctx, tx, ev.Payload)
	})
	if err != nil {
		return err // nothing recorded: nak, and the redelivery starts afresh
	}
	if !processed {
		b.log.Info("duplicate skipped", "event_id", ev.ID)
	}
	return nil
}

// invoiceAsBefore is the consumer's handling before the migration.
func (b *billing) invoiceAsBefore(ctx context.Context, payload []byte) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return b.invoice(ctx, tx, payload) })
}

// invoice writes the order's invoice in tx.
func (b *billing) invoice(ctx context.Context, tx pgx.Tx, payload []byte) error {
	var o order
	if err := json.Unmarshal(payload, &o); err != nil {
		return fmt.Errorf("decoding the order: %w", err)
	}
	_, err := tx.Exec(ctx, `INSERT INTO invoices (order_id, amount_cents) VALUES ($1, $2)`, o.ID, o.TotalCents)
	return err
}

type server struct {
	pool   *pgxpool.Pool
	outbox *herald.Writer[pgx.Tx]
	js     jetstream.JetStream
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

	// The event's id is chosen here, so that both copies carry it.
	ev := herald.Message{
		ID:            herald.NewID(),
		Topic:         "orders.placed",
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   o.ID,
		Payload:       payload,
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`,
			o.ID, o.Customer, o.TotalCents); err != nil {
			return err
		}
		// ... the items, as before ...
		return s.outbox.WriteTx(ctx, tx, ev)
	})
	if err != nil {
		http.Error(w, "the order was not placed", http.StatusInternalServerError)
		return
	}

	// The old path, kept for the overlap only (removed in step 4). The
	// message carries the headers the relay's copy will carry, so that
	// consumers (and JetStream's duplicate window) know the two are one.
	msg := &nats.Msg{Subject: ev.Topic, Data: ev.Payload, Header: nats.Header{}}
	herald.EventHeaders(&herald.Envelope{Message: ev}, msg.Header.Set)
	msg.Header.Set(jetstream.MsgIDHeader, ev.ID)
	if _, err := s.js.PublishMsg(ctx, msg); err != nil { //nolint:heraldvet // overlap, removed in step 4
		// Harmless now: the relay delivers the event anyway.
		s.log.Warn("direct publish failed; the relay will deliver", "event_id", ev.ID, "err", err)
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

// The services' wiring.
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
	outbox, err := heraldpg.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	ib, err := heraldinbox.NewPostgres(nil)
	if err != nil {
		log.Fatal(err)
	}
	s := &server{pool: pool, outbox: outbox, js: js, log: slog.Default()}
	http.HandleFunc("POST /orders", s.placeOrder)

	b := &billing{pool: pool, inbox: ib, log: slog.Default()}
	consumer, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{Durable: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := consumer.Consume(func(msg jetstream.Msg) {
		if err := b.receive(ctx, msg); err != nil {
			_ = msg.Nak()
			return
		}
		_ = msg.Ack()
	}); err != nil {
		log.Fatal(err)
	}
}
