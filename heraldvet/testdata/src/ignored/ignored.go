// Package ignored holds the cases of the check for WriteTx errors that are
// dropped.
package ignored

import (
	"context"
	"database/sql"
	"errors"

	"github.com/herald-outbox/herald"
)

var msg = herald.Message{Topic: "orders.placed"}

func dropped(ctx context.Context, w *herald.Writer[*sql.Tx], tx *sql.Tx) {
	w.WriteTx(ctx, tx, msg)            // want `the error from WriteTx is ignored: if the events were not written, the transaction must not commit`
	_ = w.WriteTx(ctx, tx, msg)        // want `the error from WriteTx is ignored`
	defer w.WriteTx(ctx, tx, msg)      // want `the error from WriteTx is ignored`
	go w.WriteTx(ctx, tx, msg)         // want `the error from WriteTx is ignored`
	n, _ := 1, w.WriteTx(ctx, tx, msg) // want `the error from WriteTx is ignored`
	(w.WriteTx(ctx, tx, msg))          // want `the error from WriteTx is ignored`
	_ = n
}

// Nothing below is reported.

func checked(ctx context.Context, w *herald.Writer[*sql.Tx], tx *sql.Tx) error {
	err := w.WriteTx(ctx, tx, msg)
	if err != nil {
		return err
	}
	if err := w.WriteTx(ctx, tx, msg); err != nil {
		return err
	}
	var errs []error
	errs = append(errs, w.WriteTx(ctx, tx, msg))
	return errors.Join(append(errs, w.WriteTx(ctx, tx, msg))...)
}

func returned(ctx context.Context, w *herald.Writer[*sql.Tx], tx *sql.Tx) error {
	return w.WriteTx(ctx, tx, msg)
}

// Another type's WriteTx is not Herald's.
type writer struct{}

func (writer) WriteTx(ctx context.Context, tx *sql.Tx) error { return nil }

func otherWriter(ctx context.Context, tx *sql.Tx) {
	var w writer
	w.WriteTx(ctx, tx)
}
