package heraldotel_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldotel"
)

// producerContext returns a context holding the producer span of the
// constants, with tracestate ts.
func producerContext(t *testing.T, ts string) context.Context {
	t.Helper()
	tid, err := trace.TraceIDFromHex(producerTrace)
	require.NoError(t, err)
	sid, err := trace.SpanIDFromHex(producerSpan)
	require.NoError(t, err)
	state, err := trace.ParseTraceState(ts)
	require.NoError(t, err)
	return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: state,
	}))
}

func TestTraceHeaders(t *testing.T) {
	t.Parallel()

	t.Run("AContextWithoutASpanGivesNil", func(t *testing.T) {
		t.Parallel()
		require.Nil(t, heraldotel.TraceHeaders(context.Background()))
		invalid := trace.ContextWithSpanContext(context.Background(), trace.SpanContext{})
		require.Nil(t, heraldotel.TraceHeaders(invalid))
	})

	t.Run("ASpanGivesTraceparentAndItsTracestate", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, map[string]string{"traceparent": traceparent},
			heraldotel.TraceHeaders(producerContext(t, "")))
		require.Equal(t, map[string]string{"traceparent": traceparent, "tracestate": "shop=1,vendor=x"},
			heraldotel.TraceHeaders(producerContext(t, "shop=1,vendor=x")))
	})

	t.Run("TheHeadersAreValidForTheWriter", func(t *testing.T) {
		t.Parallel()
		for name := range heraldotel.TraceHeaders(producerContext(t, "shop=1")) {
			require.NoError(t, herald.ValidateHeaderName(name))
		}
	})

	t.Run("ContextHeadersUsesTheGivenPropagator", func(t *testing.T) {
		t.Parallel()
		member, err := baggage.NewMember("tenant", "acme")
		require.NoError(t, err)
		bag, err := baggage.New(member)
		require.NoError(t, err)
		ctx := baggage.ContextWithBaggage(producerContext(t, ""), bag)

		fn := heraldotel.ContextHeaders(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
		require.Equal(t, map[string]string{"traceparent": traceparent, "baggage": "tenant=acme"}, fn(ctx))
		require.Equal(t, map[string]string{"traceparent": traceparent}, heraldotel.ContextHeaders(nil)(ctx),
			"nil means W3C trace context alone")
		require.Nil(t, fn(context.Background()), "nothing to inject gives nil")
	})
}

func TestExtract(t *testing.T) {
	t.Parallel()

	t.Run("AConsumerContinuesFromTheHeaders", func(t *testing.T) {
		t.Parallel()
		sc := trace.SpanContextFromContext(heraldotel.Extract(context.Background(),
			map[string]string{"traceparent": traceparent, "tracestate": "shop=1"}))
		require.True(t, sc.IsRemote())
		require.Equal(t, producerTrace, sc.TraceID().String())
		require.Equal(t, producerSpan, sc.SpanID().String())
		require.Equal(t, "shop=1", sc.TraceState().String())
	})

	t.Run("NamesMatchRegardlessOfCase", func(t *testing.T) {
		t.Parallel()
		// An HTTP hop (a webhook) canonicalizes names.
		sc := trace.SpanContextFromContext(heraldotel.Extract(context.Background(),
			map[string]string{"Traceparent": traceparent, "Tracestate": "shop=1"}))
		require.Equal(t, producerSpan, sc.SpanID().String())
		require.Equal(t, "shop=1", sc.TraceState().String())
	})

	t.Run("AnExactSpellingWinsOverOtherCases", func(t *testing.T) {
		t.Parallel()
		other := "00-" + producerTrace + "-1111111111111111-01"
		for range 20 { // map order varies from run to run
			sc := trace.SpanContextFromContext(heraldotel.Extract(context.Background(),
				map[string]string{"TRACEPARENT": other, "traceparent": traceparent, "Traceparent": other}))
			require.Equal(t, producerSpan, sc.SpanID().String())
			sc = trace.SpanContextFromContext(heraldotel.Extract(context.Background(),
				map[string]string{"TRACEPARENT": traceparent, "Traceparent": other}))
			require.Equal(t, producerSpan, sc.SpanID().String(), "the least spelling in byte order wins")
		}
	})

	t.Run("HeadersWithoutValidTraceContextLeaveTheContextAsItIs", func(t *testing.T) {
		t.Parallel()
		ctx := producerContext(t, "")
		for _, h := range []map[string]string{nil, {}, {"traceparent": "garbage"}, {"X-Tenant": "acme"}} {
			got := heraldotel.Extract(ctx, h)
			require.Equal(t, producerSpan, trace.SpanContextFromContext(got).SpanID().String())
		}
		require.False(t, trace.SpanContextFromContext(heraldotel.Extract(context.Background(), nil)).IsValid())
	})

	t.Run("ExtractWithReadsWhatContextHeadersWrote", func(t *testing.T) {
		t.Parallel()
		member, err := baggage.NewMember("tenant", "acme")
		require.NoError(t, err)
		bag, err := baggage.New(member)
		require.NoError(t, err)
		prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
		h := heraldotel.ContextHeaders(prop)(baggage.ContextWithBaggage(producerContext(t, ""), bag))

		ctx := heraldotel.ExtractWith(context.Background(), prop, h)
		require.Equal(t, "acme", baggage.FromContext(ctx).Member("tenant").Value())
		require.Equal(t, producerSpan, trace.SpanContextFromContext(ctx).SpanID().String())
	})
}

// The root package must stay free of OpenTelemetry: users who do not trace
// never download it. (imports_test.go in the root checks the whole closure;
// this names the reason heraldotel exists as a package of its own.)
func TestTheRootPackageDoesNotImportHeraldotel(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath", "github.com/herald-outbox/herald").Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var n int
	for dec.More() {
		var p struct{ ImportPath string }
		require.NoError(t, dec.Decode(&p))
		n++
		require.NotEqual(t, "github.com/herald-outbox/herald/heraldotel", p.ImportPath)
		require.False(t, strings.HasPrefix(p.ImportPath, "go.opentelemetry.io/"), "the root depends on %s", p.ImportPath)
	}
	require.Greater(t, n, 10, "go list returned too few packages to be a real dependency list")
}
