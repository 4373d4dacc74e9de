package heraldotel_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldotel"
)

// The service's writer captures the span of WriteTx's context; the relay's
// publisher starts a span per event, linked to that one, and sends its own
// trace context to the broker, where a consumer continues it.
func Example() {
	dir, err := os.MkdirTemp("", "heraldotel-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	spans := tracetest.NewSpanRecorder() // an exporter, in a real service
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(ctx) }()

	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	writer, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	writer = writer.WithContextHeaders(heraldotel.TraceHeaders)

	// The request that places the order, inside its span.
	reqCtx, reqSpan := tp.Tracer("shop").Start(ctx, "POST /orders")
	tx, err := db.BeginTx(reqCtx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if err := writer.WriteTx(reqCtx, tx, herald.Message{Topic: "orders", AggregateID: "42", Payload: []byte(`{}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	reqSpan.End()

	// The relay, here in the same process, with a broker that hands what
	// it receives to the consumer below.
	received := make(chan herald.Envelope, 1)
	broker := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		for _, env := range batch {
			received <- env
		}
		return nil
	})
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store:     store,
		Logger:    slog.New(slog.DiscardHandler),
		Publisher: heraldotel.NewPublisher(broker, &heraldotel.Config{TracerProvider: tp, System: "nats"}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	msg := <-received
	if err := relay.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	// The consumer.
	_, consume := tp.Tracer("billing").Start(heraldotel.Extract(ctx, msg.Headers), "process orders",
		trace.WithSpanKind(trace.SpanKindConsumer))
	consume.End()

	for _, s := range spans.Ended() {
		line := fmt.Sprintf("%-14s in the request's trace: %v", s.Name(), s.SpanContext().TraceID() == reqSpan.SpanContext().TraceID())
		for _, l := range s.Links() {
			line += fmt.Sprintf(", linked to the request's span: %v", l.SpanContext.SpanID() == reqSpan.SpanContext().SpanID())
		}
		fmt.Println(line)
	}
	// Output:
	// POST /orders   in the request's trace: true
	// publish orders in the request's trace: true, linked to the request's span: true
	// process orders in the request's trace: true
}
