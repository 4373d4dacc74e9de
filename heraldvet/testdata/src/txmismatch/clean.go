package txmismatch

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

// Nothing in this file is reported.

// The README's pattern: one transaction for the row and its event.
func (s *service) sameTransaction(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
			return err
		}
		return s.pgOut.WriteTx(ctx, tx, msg)
	})
}

// Two transactions, and WriteTx on one the statements use.
func (s *service) eventWithOneOfTwo(ctx context.Context, tx, audit *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	if _, err := audit.ExecContext(ctx, `INSERT INTO audit (what) VALUES ('order')`); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, tx, msg)
}

// No statement in the function: the caller's transaction is passed on.
func (s *service) eventOnly(ctx context.Context, tx *sql.Tx) error {
	return s.outbox.WriteTx(ctx, tx, msg)
}

// A statement through a transaction that has no name here, which may be
// tx: the function is not checked.
func (s *service) unnamedTransaction(ctx context.Context, tx, audit *sql.Tx) error {
	if _, err := s.txFor(ctx).ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	if _, err := audit.ExecContext(ctx, `INSERT INTO audit (what) VALUES ('order')`); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, tx, msg)
}

func (s *service) txFor(ctx context.Context) *sql.Tx { return s.tx }

// A statement on the database handle, outside any transaction, is not
// compared.
func (s *service) autocommitStatement(ctx context.Context, tx *sql.Tx) error {
	if _, err := s.db.ExecContext(ctx, `UPDATE counters SET n = n + 1`); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, tx, msg)
}

// Events written in a transaction's body while the function holds a lock
// in another transaction: the body is a function of its own.
func (s *service) lockElsewhere(ctx context.Context) error {
	if err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return s.pgOut.WriteTx(ctx, tx, msg) }); err != nil {
		return err
	}
	other, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer other.Rollback(ctx)
	_, err = other.Exec(ctx, `SELECT pg_advisory_xact_lock(1)`)
	return err
}

// The same field for both.
func (s *service) sameField(ctx context.Context) error {
	if _, err := s.tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, s.tx, msg)
}
