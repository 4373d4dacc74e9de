// Package txmismatch holds the cases of the check that WriteTx writes
// through the transaction of the function's own statements.
package txmismatch

import (
	"context"
	"database/sql"

	"github.com/herald-outbox/herald"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type service struct {
	db     *sql.DB
	pool   *pgxpool.Pool
	tx     *sql.Tx
	outbox *herald.Writer[*sql.Tx]
	pgOut  *herald.Writer[pgx.Tx]
	anyOut *herald.Writer[execer]
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

var msg = herald.Message{Topic: "orders.placed"}

// A second transaction: the order and its event commit apart.
func (s *service) secondTransaction(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	tx2, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx2.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	if err := s.outbox.WriteTx(ctx, tx2, msg); err != nil { // want `WriteTx writes the events through tx2, but this function's statements run on tx \(line 41\): the events would not commit with them`
		return err
	}
	if err := tx2.Commit(); err != nil {
		return err
	}
	return tx.Commit()
}

// A field holding some other transaction, where the parameter was meant.
func (s *service) fieldForParameter(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	return s.outbox.WriteTx(ctx, s.tx, msg) // want `WriteTx writes the events through s\.tx, but this function's statements run on tx`
}

// The outer transaction inside another one's body.
func (s *service) outerInsideBody(ctx context.Context) error {
	outer, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer outer.Rollback(ctx)
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
			return err
		}
		return s.pgOut.WriteTx(ctx, outer, msg) // want `WriteTx writes the events through outer, but this function's statements run on tx`
	})
}

// The database handle where the transaction was meant: it compiles when
// the Writer's transaction type is an interface both satisfy.
func (s *service) handleForTransaction(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
		return err
	}
	return s.anyOut.WriteTx(ctx, s.db, msg) // want `WriteTx writes the events through s\.db, but this function's statements run on tx`
}

// A query counts as much as an insert.
func (s *service) afterQueryRow(ctx context.Context, tx, other pgx.Tx) error {
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&n); err != nil {
		return err
	}
	return s.pgOut.WriteTx(ctx, other, msg) // want `WriteTx writes the events through other, but this function's statements run on tx`
}
