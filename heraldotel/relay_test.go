package heraldotel_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldotel"
)

// The whole path on a real outbox: a producer span around WriteTx, a relay
// claiming the committed row from SQLite, the traced publisher, the broker,
// and a consumer continuing from what the broker holds.
func TestTraceContextCrossesTheOutbox(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	w = w.WithContextHeaders(heraldotel.TraceHeaders)

	// The producer writes the event inside its span; the span ends with
	// the request, long before the relay publishes.
	id := herald.NewID()
	pctx, producer := b.producerSpan(ctx)
	tx, err := db.BeginTx(pctx, nil)
	require.NoError(t, err)
	require.NoError(t, w.WriteTx(pctx, tx, herald.Message{ID: id, Topic: "orders", Key: "order-42",
		Payload: []byte(`{"id":42}`), Headers: map[string]string{"X-Tenant": "acme"}}))
	require.NoError(t, tx.Commit())
	producer.End()
	psc := producer.SpanContext()

	row, err := store.GetEvent(ctx, id)
	require.NoError(t, err)
	stored := parseTraceparent(t, row.Headers)
	require.Equal(t, psc.TraceID(), stored.TraceID(), "the row holds the producer's trace context")
	require.Equal(t, psc.SpanID(), stored.SpanID())

	startRelay(t, store, heraldotel.NewPublisher(b.broker, &heraldotel.Config{TracerProvider: b.tp, System: "test"}))
	require.Eventually(t, func() bool {
		_, ok := b.broker.received()[id]
		return ok && len(b.ended("publish orders")) == 1
	}, 10*time.Second, 5*time.Millisecond, "the event is published and its span ended")

	pub := b.ended("publish orders")[0]
	sent := b.broker.received()[id]
	require.Equal(t, "acme", sent.Headers["X-Tenant"], "the producer's own headers travel on")

	t.Run("TheBrokerCarriesThePublishSpansContext", func(t *testing.T) {
		onBroker := parseTraceparent(t, sent.Headers)
		require.Equal(t, pub.SpanContext().TraceID(), onBroker.TraceID())
		require.Equal(t, pub.SpanContext().SpanID(), onBroker.SpanID())
		require.NotEqual(t, psc.SpanID(), onBroker.SpanID(), "the producer's traceparent was replaced")
		require.True(t, onBroker.IsSampled())
	})

	t.Run("ThePublishSpanIsLinkedToAndAChildOfTheProducerSpan", func(t *testing.T) {
		require.Len(t, pub.Links(), 1)
		link := pub.Links()[0].SpanContext
		require.Equal(t, psc.TraceID(), link.TraceID())
		require.Equal(t, psc.SpanID(), link.SpanID())
		require.Equal(t, psc.TraceID(), pub.Parent().TraceID(), "by default the trace continues")
		require.Equal(t, psc.SpanID(), pub.Parent().SpanID())
		require.True(t, pub.Parent().IsRemote(), "the parent came from the row, not from memory")
	})

	t.Run("ThePublishSpanDescribesTheEvent", func(t *testing.T) {
		require.Equal(t, trace.SpanKindProducer, pub.SpanKind())
		for key, want := range map[string]string{
			"messaging.system":           "test",
			"messaging.destination.name": "orders",
			"messaging.message.id":       id,
			"messaging.operation.type":   "send",
			"herald.attempt":             "1",
		} {
			got, ok := attr(pub, key)
			require.True(t, ok, "attribute %s is set", key)
			require.Equal(t, want, got, "attribute %s", key)
		}
		require.Equal(t, "Unset", pub.Status().Code.String(), "success leaves the status unset")
	})

	t.Run("AConsumerContinuesThePublishSpansTrace", func(t *testing.T) {
		cctx := heraldotel.Extract(ctx, sent.Headers)
		_, consumer := b.tp.Tracer("consumer").Start(cctx, "process orders", trace.WithSpanKind(trace.SpanKindConsumer))
		consumer.End()
		var got trace.SpanContext
		for _, s := range b.ended("process orders") {
			got = s.Parent()
		}
		require.Equal(t, pub.SpanContext().TraceID(), got.TraceID())
		require.Equal(t, pub.SpanContext().SpanID(), got.SpanID())
	})
}

// startRelay starts a relay with fast test timings and stops it at the end
// of the test.
func startRelay(t *testing.T, store herald.Store, pub herald.Publisher) {
	t.Helper()
	r, err := herald.NewRelay(&herald.RelayConfig{
		Store:            store,
		Publisher:        pub,
		Logger:           slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		PollInterval:     2 * time.Millisecond,
		IdlePollInterval: 20 * time.Millisecond,
		Lease:            10 * time.Second,
		PublishTimeout:   5 * time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
}
