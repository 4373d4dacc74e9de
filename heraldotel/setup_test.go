package heraldotel_test

import (
	"context"
	"maps"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// bundle is what most tests need: a tracer provider whose ended spans are
// recorded, and a broker to publish to.
type bundle struct {
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	broker *broker
}

func setup(t *testing.T) *bundle {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return &bundle{spans: rec, tp: tp, broker: &broker{}}
}

// producerSpan starts a span as a service writing events would.
func (b *bundle) producerSpan(ctx context.Context) (context.Context, trace.Span) {
	return b.tp.Tracer("shop").Start(ctx, "place order")
}

// ended returns the ended spans named name.
func (b *bundle) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// broker is a Publisher that records what it is handed, as a broker would
// hold it. Fail, when set, gives the result of each Publish call.
type broker struct {
	Fail func(batch []herald.Envelope) error

	mu   sync.Mutex
	got  []herald.Envelope
	maps []map[string]string // the header maps as handed over, not copies
}

func (b *broker) Publish(ctx context.Context, batch []herald.Envelope) error {
	b.mu.Lock()
	for _, env := range batch {
		b.maps = append(b.maps, env.Headers)
		env.Headers = maps.Clone(env.Headers)
		b.got = append(b.got, env)
	}
	b.mu.Unlock()
	if b.Fail != nil {
		return b.Fail(batch)
	}
	return nil
}

// received returns the envelopes the broker was handed, by event id.
func (b *broker) received() map[string]herald.Envelope {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]herald.Envelope, len(b.got))
	for _, env := range b.got {
		out[env.ID] = env
	}
	return out
}

// envelope returns an envelope ready to publish.
func envelope(topic string, headers map[string]string) herald.Envelope {
	return herald.Envelope{
		Message: herald.Message{ID: herald.NewID(), Topic: topic, Key: "k", Type: "order.placed",
			Payload: []byte(`{"n":1}`), Headers: headers},
		Attempt: 1,
	}
}

// attr returns the value of a span's attribute key, and whether it is set.
func attr(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// parseTraceparent returns the span context a traceparent header names.
func parseTraceparent(t *testing.T, headers map[string]string) trace.SpanContext {
	t.Helper()
	require.NotEmpty(t, headers["traceparent"], "headers carry a traceparent: %v", headers)
	sc := trace.SpanContextFromContext(extractTC(headers))
	require.True(t, sc.IsValid(), "traceparent %q parses", headers["traceparent"])
	return sc
}

// extractTC reads headers with OpenTelemetry's own W3C propagator, as any
// consumer would, independently of heraldotel's carrier.
func extractTC(headers map[string]string) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(headers))
}
