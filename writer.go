package herald

import (
	"context"
	"errors"
)

// WriteDriver inserts prepared messages inside a caller's transaction of type
// TTx. Implemented by the driver packages; not a stable API.
type WriteDriver[TTx any] interface {
	InsertTx(ctx context.Context, tx TTx, msgs []Message) error
}

// WriterConfig configures a Writer. A nil *WriterConfig means defaults.
type WriterConfig struct {
	// MaxPayloadBytes caps a message's payload. Defaults to 1 MiB.
	MaxPayloadBytes int
}

// Writer writes events into the outbox inside the caller's own transaction,
// so an event exists if and only if that transaction commits.
type Writer[TTx any] struct {
	driver     WriteDriver[TTx]
	maxPayload int
	ctxHeaders func(context.Context) map[string]string
}

// NewWriter returns a Writer over a driver's WriteDriver, such as
// heraldpg.NewWriter's. Most users call the driver's constructor instead.
func NewWriter[TTx any](d WriteDriver[TTx], cfg *WriterConfig) (*Writer[TTx], error) {
	if d == nil {
		return nil, errors.New("herald: NewWriter: driver is nil")
	}
	w := &Writer[TTx]{driver: d, maxPayload: DefaultMaxPayloadBytes}
	if cfg != nil {
		if cfg.MaxPayloadBytes < 0 {
			return nil, errors.New("herald: WriterConfig.MaxPayloadBytes must not be negative")
		}
		if cfg.MaxPayloadBytes > 0 {
			w.maxPayload = cfg.MaxPayloadBytes
		}
	}
	return w, nil
}

// WithContextHeaders returns a copy of w that adds to every message the
// headers fn derives from WriteTx's context, unless the message sets them
// itself. heraldotel.TraceHeaders captures the caller's W3C trace context
// (traceparent, tracestate) this way, so that the trace continues from the
// producer through the broker to the consumer.
func (w *Writer[TTx]) WithContextHeaders(fn func(context.Context) map[string]string) *Writer[TTx] {
	c := *w
	c.ctxHeaders = fn
	return &c
}

// WriteTx writes msgs into the outbox as part of tx, in one round trip. It
// validates every message first: on a *ValidationError nothing is written.
// IDs left empty are generated (UUIDv7); to know an event's id, set it with
// NewID before the call.
func (w *Writer[TTx]) WriteTx(ctx context.Context, tx TTx, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	if w.ctxHeaders != nil {
		if extra := w.ctxHeaders(ctx); len(extra) > 0 {
			msgs = withHeaders(msgs, extra)
		}
	}
	prepared, err := Prepare(msgs, w.maxPayload)
	if err != nil {
		return err
	}
	return w.driver.InsertTx(ctx, tx, prepared)
}

// withHeaders returns copies of msgs with extra added to each one's headers
// where the message does not set that name; the caller's maps are not
// changed.
func withHeaders(msgs []Message, extra map[string]string) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		h := make(map[string]string, len(m.Headers)+len(extra))
		for k, v := range extra {
			h[k] = v
		}
		for k, v := range m.Headers {
			h[k] = v
		}
		m.Headers = h
		out[i] = m
	}
	return out
}
