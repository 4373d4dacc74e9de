package heraldotel_test

import (
	"context"
	"fmt"
	"log"

	"go.opentelemetry.io/otel/trace"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldotel"
)

// The three places heraldotel goes: the producer's writer, the relay's
// publisher and the consumer's context. Example shows them at work
// together; this shows each line on its own, the consumer's with an event
// as a broker would deliver it.
func Example_wiring() {
	ctx := context.Background()
	outbox, err := heraldsqlite.NewWriter(nil)
	if err != nil {
		log.Fatal(err)
	}
	var pub herald.Publisher = herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }) // heraldnats.New(nc, nil), ...
	ev := herald.Message{Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}

	outbox = outbox.WithContextHeaders(heraldotel.TraceHeaders) // producer
	pub = heraldotel.NewPublisher(pub, nil)                     // relay
	ctx = heraldotel.Extract(ctx, ev.Headers)                   // consumer

	fmt.Println(outbox != nil, pub != nil)
	fmt.Println("consumer continues trace", trace.SpanContextFromContext(ctx).TraceID())
	// Output:
	// true true
	// consumer continues trace 4bf92f3577b34da6a3ce929d0e0e4736
}
