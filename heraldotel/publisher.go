package heraldotel

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/herald-outbox/herald"
)

// ScopeName is the instrumentation scope of the spans NewPublisher's
// publisher starts.
const ScopeName = "github.com/herald-outbox/herald/heraldotel"

// Values of the error.type attribute of a failed publish span.
const (
	// ErrorHeldBack: not sent, behind an earlier failed event of its key
	// (herald.ErrHeldBack); the relay sends it again later.
	ErrorHeldBack = "held_back"
	// ErrorPermanent: marked herald.Permanent; the event goes to the dead
	// letters.
	ErrorPermanent = "permanent"
	// ErrorUnavailable: marked herald.Unavailable, its destination down;
	// retried without spending the attempt.
	ErrorUnavailable = "unavailable"
	// ErrorOutage: the whole batch failed with an ordinary error, which
	// the relay takes as an outage and retries without spending attempts.
	ErrorOutage = "outage"
	// ErrorFailed: any other error of the event; the relay retries it,
	// spending an attempt.
	ErrorFailed = "failed"
)

// Config configures the publisher NewPublisher returns. A nil *Config means
// the defaults.
type Config struct {
	// TracerProvider creates the publish spans. Defaults to
	// otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads the producer's trace context from an event's headers
	// and writes the publish span's in its place. Defaults to the W3C Trace
	// Context propagator (propagation.TraceContext), not the global one:
	// the headers are a wire format between programs, which must not
	// change with one program's global settings.
	Propagator propagation.TextMapPropagator
	// System is the spans' messaging.system attribute ("nats", "kafka",
	// "rabbitmq", "redis"): a wrapped publisher cannot tell its broker.
	// Defaults to none: the attribute is left out.
	System string
	// LinkOnly starts every publish span in a trace of its own (a new root)
	// joined to the producer's span by its link only, for backends that
	// should not show a publish hours after the request that wrote the
	// event as part of that request's trace. The consumer then continues
	// the publish span's trace. Defaults to false: a publish span is the
	// child of the producer's span, in the same trace, and also linked to
	// it; an event without a producer span gets a span whose parent is the
	// span in Publish's context, if any (the relay passes none).
	LinkOnly bool
	// Attributes are added to every publish span, such as server.address.
	// Defaults to none.
	Attributes []attribute.KeyValue
}

// NewPublisher returns a herald.Publisher that traces inner: for each event
// of a batch it starts a span named "publish <topic>" (kind producer),
// linked to the producer's span found in the event's headers, hands inner a
// copy of the batch whose headers carry the publish span's trace context
// instead of the producer's, and ends each span with the event's result:
// an error status, a scrubbed exception event and an error.type attribute
// (ErrorHeldBack, ErrorPermanent, ...) when it failed.
//
// Publish returns inner's error unchanged, so the relay handles results as
// it would without tracing. The caller's batch, its envelopes and their
// header maps are never changed.
//
// An event without trace headers, or whose headers do not parse, still gets
// a publish span, with no link. With a no-op TracerProvider (no SDK
// installed) the publish span takes on its parent's context: the
// producer's trace context is sent on as it came, and an event without a
// valid one keeps its headers as they are.
//
// It panics when inner is nil.
func NewPublisher(inner herald.Publisher, cfg *Config) herald.Publisher {
	if inner == nil {
		panic("heraldotel: NewPublisher: inner publisher is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("publish"),
	}
	if c.System != "" {
		attrs = append(attrs, semconv.MessagingSystemKey.String(c.System))
	}
	attrs = append(attrs, c.Attributes...)
	return &publisher{
		inner:    inner,
		tracer:   c.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:     c.Propagator,
		fields:   c.Propagator.Fields(),
		linkOnly: c.LinkOnly,
		attrs:    attrs,
	}
}

type publisher struct {
	inner    herald.Publisher
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	fields   []string // the header names prop writes
	linkOnly bool
	attrs    []attribute.KeyValue // on every span
}

func (p *publisher) Publish(ctx context.Context, batch []herald.Envelope) (err error) {
	out := make([]herald.Envelope, len(batch))
	spans := make([]trace.Span, len(batch))
	for i := range batch {
		out[i], spans[i] = p.start(ctx, batch[i])
	}
	// The relay recovers a publisher's panic and fails the batch; the spans
	// end first so that none is left open, then the panic goes on.
	defer func() {
		if r := recover(); r != nil {
			p.end(spans, fmt.Errorf("publisher panicked: %v", r))
			panic(r)
		}
	}()
	err = p.inner.Publish(ctx, out)
	p.end(spans, err)
	return err
}

// start starts env's publish span and returns the envelope to hand inner:
// a copy whose headers carry the span's trace context.
func (p *publisher) start(ctx context.Context, env herald.Envelope) (herald.Envelope, trace.Span) {
	carrier := headerCarrier(env.Headers)
	// The producer's span is looked for in the headers alone: extracted
	// over a context without a span, a span in ctx cannot pass for it.
	producer := trace.SpanContextFromContext(p.prop.Extract(withoutSpan(ctx), carrier))
	// The parent context: the headers' trace context (and baggage, with a
	// propagator that carries it) over ctx.
	parent := p.prop.Extract(ctx, carrier)

	attrs := make([]attribute.KeyValue, 0, len(p.attrs)+6)
	attrs = append(attrs, p.attrs...)
	attrs = append(attrs,
		semconv.MessagingDestinationName(env.Topic),
		semconv.MessagingMessageID(env.ID),
		semconv.MessagingMessageBodySize(len(env.Payload)),
		attribute.Int("herald.attempt", env.Attempt),
	)
	if env.Type != "" {
		attrs = append(attrs, attribute.String("herald.event.type", env.Type))
	}
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attrs...),
	}
	if producer.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
	}
	if p.linkOnly {
		opts = append(opts, trace.WithNewRoot())
	}
	spanCtx, span := p.tracer.Start(parent, "publish "+env.Topic, opts...)

	if span.SpanContext().IsValid() {
		h := make(headerCarrier, len(env.Headers)+len(p.fields))
		for name, v := range env.Headers {
			// Every spelling of a name the propagator writes goes, so the
			// broker carries the publish span's context only, never the
			// producer's beside it under another case.
			if !p.isField(name) {
				h[name] = v
			}
		}
		p.prop.Inject(spanCtx, h)
		env.Headers = h
	}
	return env, span
}

func (p *publisher) isField(name string) bool {
	for _, f := range p.fields {
		if strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

// withoutSpan returns ctx with its span, if any, hidden.
func withoutSpan(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}

// end ends the spans with the result of Publish, spread over the batch the
// way the relay spreads it: a *herald.BatchError with one error per event
// gives each event its own, any other error is every event's.
func (p *publisher) end(spans []trace.Span, err error) {
	var be *herald.BatchError
	perEvent := errors.As(err, &be) && len(be.Errs) == len(spans)
	for i, span := range spans {
		e := err
		if perEvent {
			e = be.Errs[i]
		}
		if e != nil {
			fail(span, e, !perEvent)
		}
		span.End()
	}
}

// fail marks span as failed with err. Error text may hold a broker URL or a
// token, so only its scrubbed form reaches the span.
func fail(span trace.Span, err error, wholeBatch bool) {
	msg := herald.Scrub(err.Error())
	span.SetStatus(codes.Error, msg)
	span.SetAttributes(semconv.ErrorTypeKey.String(errorKind(err, wholeBatch)))
	span.AddEvent(semconv.ExceptionEventName, trace.WithAttributes(
		semconv.ExceptionType(fmt.Sprintf("%T", err)),
		semconv.ExceptionMessage(msg),
	))
}

// errorKind classifies err the way the relay treats it.
func errorKind(err error, wholeBatch bool) string {
	switch {
	case errors.Is(err, herald.ErrHeldBack):
		return ErrorHeldBack
	case herald.IsPermanent(err):
		return ErrorPermanent
	case herald.IsUnavailable(err):
		return ErrorUnavailable
	case wholeBatch:
		return ErrorOutage
	}
	return ErrorFailed
}
