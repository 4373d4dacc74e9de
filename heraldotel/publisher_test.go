package heraldotel_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldotel"
)

// A producer's trace context as a row of the outbox holds it.
const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
	traceparent   = "00-" + producerTrace + "-" + producerSpan + "-01"
)

// publish runs batch through a traced publisher over b.broker and returns
// Publish's error and the publish spans by event id.
func (b *bundle) publish(t *testing.T, cfg *heraldotel.Config, batch ...herald.Envelope) (error, map[string]sdktrace.ReadOnlySpan) { //nolint:staticcheck // ST1008: the error first reads as "what Publish returned, then its spans"
	t.Helper()
	if cfg == nil {
		cfg = &heraldotel.Config{}
	}
	cfg.TracerProvider = b.tp
	err := heraldotel.NewPublisher(b.broker, cfg).Publish(context.Background(), batch)
	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range b.spans.Ended() {
		if id, ok := attr(s, "messaging.message.id"); ok {
			spans[id] = s
		}
	}
	require.Len(t, spans, len(batch), "every event has its span, ended")
	return err, spans
}

func TestPublisher(t *testing.T) {
	t.Parallel()

	t.Run("TheCallersEnvelopesAndHeaderMapsAreNotChanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		batch := []herald.Envelope{
			envelope("orders", map[string]string{"traceparent": traceparent, "tracestate": "shop=1", "X-Tenant": "acme"}),
			envelope("orders", map[string]string{"X-Tenant": "globex"}),
			envelope("orders", nil),
		}
		before := make([]herald.Envelope, len(batch))
		for i, env := range batch {
			before[i] = env
			before[i].Headers = maps.Clone(env.Headers)
		}

		err, spans := b.publish(t, nil, batch...)
		require.NoError(t, err)
		require.Equal(t, before, batch, "envelopes and headers are as they were")
		require.Nil(t, batch[2].Headers)

		got := b.broker.received()
		for i, env := range batch {
			sent := got[env.ID]
			onBroker := parseTraceparent(t, sent.Headers)
			require.Equal(t, spans[env.ID].SpanContext().SpanID(), onBroker.SpanID(), "event %d carries its publish span", i)
			require.Equal(t, env.Headers["X-Tenant"], sent.Headers["X-Tenant"])
			if env.Headers != nil {
				b.broker.maps[i]["X-Probe"] = "written by the broker"
				require.NotContains(t, env.Headers, "X-Probe", "the broker was handed a map of its own")
			}
		}
		require.Equal(t, "shop=1", got[batch[0].ID].Headers["tracestate"], "the publish span inherits its parent's tracestate")
		require.NotContains(t, got[batch[1].ID].Headers, "tracestate", "an empty tracestate is left out")
	})

	t.Run("FailedEventsEndWithAnErrorStatusAndTheirKind", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		batch := make([]herald.Envelope, 5)
		for i := range batch {
			batch[i] = envelope("orders", map[string]string{"traceparent": traceparent})
		}
		perEvent := &herald.BatchError{Errs: []error{
			nil,
			errors.New("broker said no; password=hunter2"),
			herald.Permanent(errors.New("message too large")),
			fmt.Errorf("not sent: %w", herald.ErrHeldBack),
			herald.Unavailable(errors.New("destination down")),
		}}
		b.broker.Fail = func([]herald.Envelope) error { return perEvent }

		err, spans := b.publish(t, nil, batch...)
		require.Same(t, perEvent, err, "the relay gets the inner publisher's own error")
		require.Equal(t, codes.Unset, spans[batch[0].ID].Status().Code, "the delivered event's span is not an error")
		_, ok := attr(spans[batch[0].ID], "error.type")
		require.False(t, ok)
		for i, kind := range []string{heraldotel.ErrorFailed, heraldotel.ErrorPermanent, heraldotel.ErrorHeldBack, heraldotel.ErrorUnavailable} {
			s := spans[batch[i+1].ID]
			require.Equal(t, codes.Error, s.Status().Code, "event %d", i+1)
			got, _ := attr(s, "error.type")
			require.Equal(t, kind, got, "event %d", i+1)
			require.Len(t, s.Links(), 1, "a failed event's span keeps its link")
			require.Len(t, s.Events(), 1)
			require.Equal(t, "exception", s.Events()[0].Name)
		}
		failed := spans[batch[1].ID]
		require.Contains(t, failed.Status().Description, "broker said no")
		require.NotContains(t, failed.Status().Description, "hunter2", "error text is scrubbed")
		for _, kv := range failed.Events()[0].Attributes {
			require.NotContains(t, kv.Value.String(), "hunter2", "error text is scrubbed")
		}
	})

	t.Run("AWholeBatchErrorFailsEverySpanAsAnOutage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		down := errors.New("connection refused")
		b.broker.Fail = func([]herald.Envelope) error { return down }
		batch := []herald.Envelope{envelope("orders", nil), envelope("billing", nil)}

		err, spans := b.publish(t, nil, batch...)
		require.Same(t, down, err)
		for _, s := range spans {
			require.Equal(t, codes.Error, s.Status().Code)
			got, _ := attr(s, "error.type")
			require.Equal(t, heraldotel.ErrorOutage, got)
		}
	})

	t.Run("ABatchErrorOfTheWrongLengthCountsForTheWholeBatch", func(t *testing.T) {
		t.Parallel()
		// The relay takes such an error as the whole batch's; so do spans.
		b := setup(t)
		b.broker.Fail = func([]herald.Envelope) error { return &herald.BatchError{Errs: []error{nil}} }
		batch := []herald.Envelope{envelope("orders", nil), envelope("orders", nil)}

		_, spans := b.publish(t, nil, batch...)
		for _, s := range spans {
			require.Equal(t, codes.Error, s.Status().Code)
		}
	})

	t.Run("MalformedTraceHeadersGiveNoLinkAndTheEventIsStillPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var batch []herald.Envelope
		for _, tp := range []string{
			"",
			"garbage",
			"00-" + producerTrace + "-" + producerSpan,                          // no flags
			"00-00000000000000000000000000000000-" + producerSpan + "-01",       // zero trace id
			"00-" + producerTrace + "-0000000000000000-01",                      // zero span id
			"ff-" + producerTrace + "-" + producerSpan + "-01",                  // version ff is invalid
			"00-" + strings.ToUpper(producerTrace) + "-" + producerSpan + "-01", // upper case hex
			"00-" + producerTrace + "-" + producerSpan + "-01-extra",            // version 00 has no more fields
			"00-" + producerTrace[:31] + "é-" + producerSpan + "-01",
			strings.Repeat("0", 8192),
		} {
			batch = append(batch, envelope("orders", map[string]string{"traceparent": tp, "tracestate": "=;,=broken"}))
		}

		err, spans := b.publish(t, nil, batch...)
		require.NoError(t, err)
		got := b.broker.received()
		require.Len(t, got, len(batch), "every event reached the broker")
		for _, env := range batch {
			s := spans[env.ID]
			require.Empty(t, s.Links(), "traceparent %.40q gives no link", env.Headers["traceparent"])
			require.False(t, s.Parent().IsValid(), "the span starts a trace of its own")
			onBroker := parseTraceparent(t, got[env.ID].Headers)
			require.Equal(t, s.SpanContext().SpanID(), onBroker.SpanID(), "the broker gets a valid traceparent instead")
			require.Equal(t, codes.Unset, s.Status().Code)
		}
	})

	t.Run("EventsWithoutTraceHeadersGetASpanWithoutLink", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		env := envelope("orders", map[string]string{"X-Tenant": "acme"})
		err, spans := b.publish(t, nil, env)
		require.NoError(t, err)
		s := spans[env.ID]
		require.Equal(t, "publish orders", s.Name())
		require.Empty(t, s.Links())
		require.False(t, s.Parent().IsValid())
		_, ok := attr(s, "messaging.system")
		require.False(t, ok, "messaging.system is left out unless configured")
	})

	t.Run("HeaderNamesMatchRegardlessOfCase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		env := envelope("orders", map[string]string{"Traceparent": traceparent, "X-Tenant": "acme"})
		err, spans := b.publish(t, nil, env)
		require.NoError(t, err)
		s := spans[env.ID]
		require.Len(t, s.Links(), 1)
		require.Equal(t, producerSpan, s.Links()[0].SpanContext.SpanID().String())
		sent := b.broker.received()[env.ID].Headers
		require.NotContains(t, sent, "Traceparent", "the producer's context is not sent beside the publish span's")
		require.Equal(t, s.SpanContext().SpanID(), parseTraceparent(t, sent).SpanID())
	})

	t.Run("LinkOnlyStartsANewTraceLinkedToTheProducer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		env := envelope("orders", map[string]string{"traceparent": traceparent})
		err, spans := b.publish(t, &heraldotel.Config{LinkOnly: true}, env)
		require.NoError(t, err)
		s := spans[env.ID]
		require.False(t, s.Parent().IsValid(), "no parent")
		require.NotEqual(t, producerTrace, s.SpanContext().TraceID().String())
		require.Len(t, s.Links(), 1)
		require.Equal(t, producerTrace, s.Links()[0].SpanContext.TraceID().String())
		require.Equal(t, producerSpan, s.Links()[0].SpanContext.SpanID().String())
		require.Equal(t, s.SpanContext().TraceID(), parseTraceparent(t, b.broker.received()[env.ID].Headers).TraceID())
	})

	t.Run("AnUnsampledProducerGivesAnUnsampledPublish", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		env := envelope("orders", map[string]string{"traceparent": "00-" + producerTrace + "-" + producerSpan + "-00"})
		require.NoError(t, heraldotel.NewPublisher(b.broker, &heraldotel.Config{TracerProvider: b.tp}).
			Publish(context.Background(), []herald.Envelope{env}))
		require.Empty(t, b.spans.Ended(), "the parent-based sampler follows the producer's decision")
		onBroker := parseTraceparent(t, b.broker.received()[env.ID].Headers)
		require.Equal(t, producerTrace, onBroker.TraceID().String())
		require.False(t, onBroker.IsSampled(), "and the consumer is told so")
	})

	t.Run("WithoutATracerTheHeadersPassThroughAsTheyAre", func(t *testing.T) {
		t.Parallel()
		// A no-op provider (no SDK installed) makes no spans of its own.
		for _, linkOnly := range []bool{false, true} {
			b := setup(t)
			batch := []herald.Envelope{
				envelope("orders", map[string]string{"traceparent": traceparent, "tracestate": "shop=1"}),
				envelope("orders", map[string]string{"traceparent": "garbage", "X-Tenant": "acme"}),
				envelope("orders", nil),
			}
			pub := heraldotel.NewPublisher(b.broker, &heraldotel.Config{TracerProvider: noop.NewTracerProvider(), LinkOnly: linkOnly})
			require.NoError(t, pub.Publish(context.Background(), batch))
			got := b.broker.received()
			for _, env := range batch {
				require.Equal(t, env.Headers, got[env.ID].Headers, "LinkOnly %v", linkOnly)
			}
		}
	})

	t.Run("APanickingPublisherStillEndsItsSpans", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.broker.Fail = func([]herald.Envelope) error { panic("broker client bug") }
		env := envelope("orders", nil)
		pub := heraldotel.NewPublisher(b.broker, &heraldotel.Config{TracerProvider: b.tp})
		require.PanicsWithValue(t, "broker client bug", func() {
			_ = pub.Publish(context.Background(), []herald.Envelope{env})
		}, "the relay recovers it and fails the batch")
		spans := b.ended("publish orders")
		require.Len(t, spans, 1)
		require.Equal(t, codes.Error, spans[0].Status().Code)
		require.Contains(t, spans[0].Status().Description, "broker client bug")
	})

	t.Run("AnEmptyBatchIsPassedOn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		calls := 0
		b.broker.Fail = func(batch []herald.Envelope) error { calls++; return nil }
		require.NoError(t, heraldotel.NewPublisher(b.broker, &heraldotel.Config{TracerProvider: b.tp}).Publish(context.Background(), nil))
		require.Equal(t, 1, calls)
		require.Empty(t, b.spans.Ended())
	})

	t.Run("ANilInnerPublisherIsRefused", func(t *testing.T) {
		t.Parallel()
		require.PanicsWithValue(t, "heraldotel: NewPublisher: inner publisher is nil", func() {
			heraldotel.NewPublisher(nil, nil)
		})
	})
}

// Rows written by other programs can hold anything in their trace headers:
// publishing never panics, never fails because of them, and always hands
// the broker a valid traceparent.
func FuzzPublishTraceHeaders(f *testing.F) {
	f.Add("Traceparent", traceparent, "shop=1")
	f.Add("traceparent", "00-"+producerTrace+"-"+producerSpan+"-01", "a=b,c=d")
	f.Add("traceparent", "01-"+producerTrace+"-"+producerSpan+"-09-what", "")
	f.Add("TRACESTATE", "", strings.Repeat("k=v,", 40))
	f.Add("traceparent", "\x00\xff", "\xff")
	f.Fuzz(func(t *testing.T, name, tp, ts string) {
		b := setup(t)
		env := envelope("orders", map[string]string{name: tp, "tracestate": ts})
		before := maps.Clone(env.Headers)
		err := heraldotel.NewPublisher(b.broker, &heraldotel.Config{TracerProvider: b.tp}).
			Publish(context.Background(), []herald.Envelope{env})
		require.NoError(t, err)
		require.Equal(t, before, env.Headers)
		sent := b.broker.received()[env.ID]
		sc := trace.SpanContextFromContext(extractTC(sent.Headers))
		require.True(t, sc.IsValid(), "the broker gets a valid traceparent: %v", sent.Headers)
		if sc.IsSampled() {
			require.Len(t, b.spans.Ended(), 1)
		} else {
			require.Empty(t, b.spans.Ended(), "an unsampled producer's publish is not recorded")
		}
	})
}
