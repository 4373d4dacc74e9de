package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// The stream, the subject and the names billing uses.
const (
	streamName      = "ORDERS"
	streamSubjects  = "orders.>"
	subjectPlaced   = "orders.placed"
	typeOrderPlaced = "order.placed"
	// consumerName is both the durable JetStream consumer and the inbox's
	// consumer name: each consumer of an event has its own inbox entries.
	consumerName = "billing"
)

// identifier is the pattern a schema name must match before it is put into
// SQL; heraldinbox enforces the same one.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// errMalformed marks an event that no redelivery can fix: it is terminated
// rather than retried.
var errMalformed = errors.New("malformed event")

// orderPlaced is what billing reads of an order.placed event. It decodes the
// producer's JSON into its own type: services share events, not code.
type orderPlaced struct {
	ID         string `json:"id"`
	TotalCents *int64 `json:"total_cents"`
}

// billing turns order.placed events into invoices, once per event.
type billing struct {
	pool          *pgxpool.Pool
	inbox         *heraldinbox.Inbox
	migrations    []string
	insertInvoice string
	log           *slog.Logger
	// nakDelay is how long JetStream waits before redelivering an event
	// whose processing failed.
	nakDelay time.Duration
}

func newBilling(pool *pgxpool.Pool, schema string, log *slog.Logger) (*billing, error) {
	if !identifier.MatchString(schema) {
		return nil, fmt.Errorf("schema %q must match %s", schema, identifier)
	}
	inbox, err := heraldinbox.NewPostgres(&heraldinbox.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	invoices := `"` + schema + `".invoices`
	return &billing{
		pool:  pool,
		inbox: inbox,
		migrations: []string{
			// CREATE ... IF NOT EXISTS can still fail when two sessions run
			// it at the same moment; the lock, shared with orders,
			// serialises them.
			`SELECT pg_advisory_xact_lock(hashtext('orderflow:` + schema + `'))`,
			`CREATE SCHEMA IF NOT EXISTS "` + schema + `"`,
			// No unique key on order_id: the inbox is what guarantees one
			// invoice per event.
			`CREATE TABLE IF NOT EXISTS ` + invoices + ` (
				id           uuid        PRIMARY KEY,
				order_id     uuid        NOT NULL,
				amount_cents bigint      NOT NULL,
				created_at   timestamptz NOT NULL DEFAULT now())`,
			`CREATE INDEX IF NOT EXISTS invoices_order_id_idx ON ` + invoices + ` (order_id)`,
		},
		insertInvoice: `INSERT INTO ` + invoices + ` (id, order_id, amount_cents) VALUES ($1, $2, $3)`,
		log:           log,
		nakDelay:      5 * time.Second,
	}, nil
}

// migrate creates the invoices table and the inbox table.
func (b *billing) migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, s := range b.migrations {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrating the invoices table: %w", err)
	}
	return b.inbox.MigratePgx(ctx, b.pool)
}

// handle invoices one order.placed event. The invoice and the inbox record
// of (billing, event id) commit in one transaction, so a redelivered event
// finds the record and writes nothing: processed is false. On an error
// nothing was written and a redelivery starts afresh; errors wrapping
// errMalformed will fail every time.
func (b *billing) handle(ctx context.Context, ev herald.Message) (processed bool, err error) {
	var order orderPlaced
	if err := json.Unmarshal(ev.Payload, &order); err != nil {
		return false, fmt.Errorf("%w: event %s: payload: %v", errMalformed, ev.ID, err)
	}
	orderID, err := uuid.Parse(order.ID)
	if err != nil {
		return false, fmt.Errorf("%w: event %s: id %q is not a UUID", errMalformed, ev.ID, order.ID)
	}
	if order.TotalCents == nil || *order.TotalCents < 0 {
		return false, fmt.Errorf("%w: event %s: total_cents missing or negative", errMalformed, ev.ID)
	}
	amount := *order.TotalCents

	processed, err = b.inbox.ProcessPgx(ctx, b.pool, consumerName, ev.ID, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, b.insertInvoice, uuid.New(), orderID, amount)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("invoicing order %s (event %s): %w", orderID, ev.ID, err)
	}
	if processed {
		b.log.Info("invoiced", "order_id", orderID, "amount_cents", amount, "event_id", ev.ID)
	} else {
		b.log.Info("duplicate skipped: already invoiced", "order_id", orderID, "event_id", ev.ID)
	}
	return processed, nil
}

// receive handles one delivery and settles it with JetStream: Ack once the
// invoice is committed (or was already), Nak with a delay on a failure that
// a redelivery may fix, Term on an event that cannot ever be processed.
func (b *billing) receive(ctx context.Context, msg jetstream.Msg) {
	ev, err := heraldnats.ParseJetStream(msg)
	if err == nil && ev.Type != typeOrderPlaced {
		// Not an event billing acts on: acknowledge it and move on.
		b.log.Debug("ignored event", "type", ev.Type, "event_id", ev.ID)
		b.settle(msg.Ack(), ev.ID, "ack")
		return
	}
	if err == nil {
		_, err = b.handle(ctx, ev)
	}
	switch {
	case err == nil:
		// If this ack is lost, JetStream redelivers after AckWait and the
		// inbox turns the redelivery into a no-op.
		b.settle(msg.Ack(), ev.ID, "ack")
	case errors.Is(err, errMalformed), errors.Is(err, heraldnats.ErrNotHerald):
		b.log.Error("dropping an event that cannot be processed", "subject", msg.Subject(), "err", err)
		b.settle(msg.Term(), ev.ID, "term")
	default:
		b.log.Warn("processing failed; will be redelivered", "event_id", ev.ID, "retry_in", b.nakDelay, "err", err)
		b.settle(msg.NakWithDelay(b.nakDelay), ev.ID, "nak")
	}
}

func (b *billing) settle(err error, eventID, how string) {
	if err != nil {
		// JetStream redelivers after AckWait; the inbox absorbs it.
		b.log.Warn("settling a message failed", "how", how, "event_id", eventID, "err", err)
	}
}

// consume receives from cons until ctx ends, one message at a time.
func (b *billing) consume(ctx context.Context, cons jetstream.Consumer) error {
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	defer it.Stop()
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receiving: %w", err)
		}
		// A message being processed when shutdown begins is finished, not
		// abandoned: its transaction gets its own deadline.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		b.receive(pctx, msg)
		cancel()
	}
}

// ensureStream returns the ORDERS stream, creating it if it does not exist
// yet with the settings `herald relay --nats-create-stream` uses, so that
// billing and the relay can start in either order.
func ensureStream(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	stream, err := js.Stream(ctx, streamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:       streamName,
			Subjects:   []string{streamSubjects},
			Storage:    jetstream.FileStorage,
			Duplicates: 2 * time.Minute,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			stream, err = js.Stream(ctx, streamName) // created meanwhile by the relay
		}
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", streamName, err)
	}
	return stream, nil
}

// consumerConfig is billing's durable pull consumer: explicit acks, every
// order.placed event from the start of the stream.
func consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       consumerName,
		FilterSubject: subjectPlaced,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
	}
}

// replayConfig is a temporary consumer that reads every order.placed event
// still in the stream again, as a redelivery would, without moving the
// durable consumer. The server deletes it a minute after billing stops.
func replayConfig() jetstream.ConsumerConfig {
	c := consumerConfig()
	c.Durable = ""
	c.Name = consumerName + "-replay-" + uuid.NewString()[:8]
	c.InactiveThreshold = time.Minute
	return c
}
