// Package orders is checked by go vet -vettool=heraldvet in a module of its
// own that requires the real Herald module (see vettool_test.go). Each
// `want` comment is a regular expression that a diagnostic on its line
// must match; a line without one must have none.
package orders

import (
	"context"
	"database/sql"
	"net/http"
	"strings"

	"github.com/herald-outbox/herald"
)

type service struct {
	db     *sql.DB
	outbox *herald.Writer[*sql.Tx]
}

var placed = herald.Message{Topic: "orders.placed", Payload: []byte(`{}`)}

// The dual write: the order commits, then a webhook is posted.
func (s *service) placeThenNotify(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	resp, err := http.Post("https://hooks.example.com/orders", "application/json", strings.NewReader(`{}`)) // want `dual write: http\.Post publishes in a function that also runs a database transaction \(sql\.DB\.BeginTx, line 25\)` http
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// The event goes into another transaction than the order.
func (s *service) placeInTwo(ctx context.Context, tx, other *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, other, placed) // want `WriteTx writes the events through other, but this function's statements run on tx \(line 45\)`
}

// The error of WriteTx is dropped.
func (s *service) placeIgnoringErrors(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	_ = s.outbox.WriteTx(ctx, tx, placed) // want `the error from WriteTx is ignored`
	return nil
}

// The outbox way: nothing to report.
func (s *service) place(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	if err := s.outbox.WriteTx(ctx, tx, placed); err != nil {
		return err
	}
	return tx.Commit()
}
