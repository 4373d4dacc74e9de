package heraldinbox_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald/heraldinbox"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// A consumer that applies an order's events only in version order: the
// inbox skips a duplicate, AdvancePgx refuses an event older than the
// order's last one handled, and both commit with the handler's update.
func ExampleInbox_AdvancePgx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	ib, _ := heraldinbox.NewPostgres(nil) // tables public.herald_inbox and public.herald_inbox_versions
	_ = ib.MigratePgx(ctx, pool)

	handle := func(msg jetstream.Msg) error {
		ev, err := heraldnats.ParseJetStream(msg) // AggregateVersion from the Herald-Aggregate-Version header
		if err != nil {
			return err
		}
		_, err = ib.ProcessPgx(ctx, pool, "shipping", ev.ID, func(ctx context.Context, tx pgx.Tx) error {
			if err := ib.AdvancePgx(ctx, tx, "shipping", heraldinbox.AggregateOf(ev)); err != nil {
				return err // stale: the transaction rolls back, the update below never runs
			}
			_, err := tx.Exec(ctx, `UPDATE shipments SET order_status = $2 WHERE order_id = $1`, ev.AggregateID, ev.Type)
			return err
		})
		if errors.Is(err, heraldinbox.ErrStale) {
			log.Printf("event %s: %v: not applied", ev.ID, err)
			return msg.Ack() // old news: redelivering it would be refused again
		}
		if err != nil {
			return err // nothing was recorded; ack nothing and let the broker redeliver
		}
		return msg.Ack()
	}
	_ = handle // the consumer's callback: consumer.Consume(func(msg jetstream.Msg) { ... handle(msg) ... })
}
