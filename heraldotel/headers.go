// Package heraldotel carries OpenTelemetry trace context through the
// outbox, from the transaction that writes an event, through the relay and
// the broker, to the consumer.
//
// Three steps, one per process that touches the event:
//
//   - the producer captures its span's W3C trace context (traceparent, and
//     tracestate when there is one) into the event's headers as WriteTx runs:
//     writer = writer.WithContextHeaders(heraldotel.TraceHeaders);
//   - the relay's publisher, wrapped by NewPublisher, starts a "publish
//     <topic>" span per event, linked to (and by default a child of) the
//     producer's span, and hands the broker the publish span's trace
//     context in place of the producer's;
//   - the consumer continues the trace from the message's headers with
//     Extract.
//
// The event is published after its transaction commits, possibly much
// later (an outage, retries), so the publish span can start long after the
// producer's span ended. Config.LinkOnly starts each publish span in a
// trace of its own, joined to the producer's by the link only.
//
// Headers are matched by name regardless of case: an HTTP hop may have
// turned traceparent into Traceparent. A header that does not parse, from
// a row another program wrote, is ignored: the event is still published,
// with a span that has no link.
package heraldotel

import (
	"context"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceHeaders returns the W3C trace context of the span in ctx as event
// headers: traceparent, and tracestate when the span has one. It returns
// nil when ctx holds no valid span. It uses the W3C Trace Context format
// whatever the global propagator is; use ContextHeaders for another format.
//
// It has the signature Writer.WithContextHeaders takes:
//
//	writer = writer.WithContextHeaders(heraldotel.TraceHeaders)
//
// A message that sets traceparent itself keeps its own value.
func TraceHeaders(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	return inject(ctx, propagation.TraceContext{})
}

// ContextHeaders returns a function for Writer.WithContextHeaders that
// captures what p injects from WriteTx's context (for example W3C trace
// context and baggage, with a composite propagator), or nil when p injects
// nothing. A nil p means the W3C Trace Context propagator, as in
// TraceHeaders. The names p injects must be valid Herald header names (see
// herald.ValidateHeaderName), or WriteTx refuses the messages.
func ContextHeaders(p propagation.TextMapPropagator) func(context.Context) map[string]string {
	if p == nil {
		p = propagation.TraceContext{}
	}
	return func(ctx context.Context) map[string]string { return inject(ctx, p) }
}

func inject(ctx context.Context, p propagation.TextMapPropagator) map[string]string {
	h := headerCarrier{}
	p.Inject(ctx, h)
	if len(h) == 0 {
		return nil
	}
	return h
}

// Extract returns ctx carrying the trace context found in a consumed
// message's headers (such as the Headers of the herald.Message
// heraldnats.Parse returns), so that the consumer's spans continue the
// publish span's trace:
//
//	msg, err := heraldnats.Parse(m)
//	ctx, span := tracer.Start(heraldotel.Extract(ctx, msg.Headers), "process orders",
//		trace.WithSpanKind(trace.SpanKindConsumer))
//
// Names are matched regardless of case. Headers without a valid
// traceparent leave ctx as it is.
func Extract(ctx context.Context, headers map[string]string) context.Context {
	return ExtractWith(ctx, propagation.TraceContext{}, headers)
}

// ExtractWith is Extract with the propagator p, such as a composite of
// trace context and baggage. A nil p means the W3C Trace Context
// propagator.
func ExtractWith(ctx context.Context, p propagation.TextMapPropagator, headers map[string]string) context.Context {
	if p == nil {
		p = propagation.TraceContext{}
	}
	return p.Extract(ctx, headerCarrier(headers))
}

// headerCarrier is a propagation.TextMapCarrier over event headers whose
// Get ignores case: brokers and HTTP hops do not all keep a header name's
// spelling, and rows written by other programs may spell it their own way.
type headerCarrier map[string]string

// Get returns the value of key, spelled exactly or else in any case. When
// several spellings differ only in case, the least one in byte order wins,
// so the choice does not depend on map order.
func (c headerCarrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	var (
		match string
		found bool
	)
	for name := range c {
		if strings.EqualFold(name, key) && (!found || name < match) {
			match, found = name, true
		}
	}
	if !found {
		return ""
	}
	return c[match]
}

// Set sets key. Only ever called on maps this package made.
func (c headerCarrier) Set(key, value string) { c[key] = value }

// Keys returns the header names in byte order.
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
