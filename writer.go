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

// WriteTx writes msgs into the outbox as part of tx, in one round trip. It
// validates every message first: on a *ValidationError nothing is written.
// IDs left empty are generated (UUIDv7); to know an event's id, set it with
// NewID before the call.
func (w *Writer[TTx]) WriteTx(ctx context.Context, tx TTx, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	prepared, err := Prepare(msgs, w.maxPayload)
	if err != nil {
		return err
	}
	return w.driver.InsertTx(ctx, tx, prepared)
}
