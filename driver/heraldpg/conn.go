package heraldpg

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// conn is what the driver needs of a connection pool, so that one set of
// queries runs on a pgx pool and on a database/sql pool over pgx's stdlib.
type conn interface {
	exec(ctx context.Context, sql string, args ...any) (int64, error)
	// query calls each once per row with a function that scans it.
	query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error
	// inTx runs fn in one transaction, committed when fn returns nil.
	inTx(ctx context.Context, fn func(c conn) error) error
	// inTxSet is inTx with settings (SET LOCAL statements, each ending
	// in a semicolon) made as the transaction begins: on a pgx pool in
	// the same round trip as BEGIN.
	inTxSet(ctx context.Context, set string, fn func(c conn) error) error
}

// pgxQuerier is what a pgx pool and a pgx transaction have in common.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}

type pgxConn struct{ q pgxQuerier }

func (c pgxConn) exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := c.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (c pgxConn) query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := c.q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// txIdleTimeout bounds how long a transaction of the driver may sit idle
// between its statements, which normally follow each other within a
// millisecond: a relay cut off from the database (or stopped) mid-claim
// must not leave its session holding row and key locks until TCP notices
// the peer is gone. The server ends such a session.
const txIdleTimeout = `SET LOCAL idle_in_transaction_session_timeout = '1s'`

// txBeginner is a pgx pool, which can begin with the idle timeout in the
// same round trip as BEGIN.
type txBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

func (c pgxConn) inTx(ctx context.Context, fn func(c conn) error) error {
	return c.inTxSet(ctx, "", fn)
}

func (c pgxConn) inTxSet(ctx context.Context, set string, fn func(c conn) error) error {
	if b, ok := c.q.(txBeginner); ok {
		return pgx.BeginTxFunc(ctx, b, pgx.TxOptions{BeginQuery: "BEGIN; " + txIdleTimeout + "; " + set},
			func(tx pgx.Tx) error { return fn(pgxConn{tx}) })
	}
	return pgx.BeginFunc(ctx, c.q, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, txIdleTimeout+"; "+set); err != nil {
			return err
		}
		return fn(pgxConn{tx})
	})
}

// sqlQuerier is what a *sql.DB and a *sql.Tx have in common.
type sqlQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

type sqlConn struct{ q sqlQuerier }

func (c sqlConn) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := c.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (c sqlConn) query(ctx context.Context, query string, args []any, each func(scan func(dest ...any) error) error) error {
	rows, err := c.q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (c sqlConn) inTx(ctx context.Context, fn func(c conn) error) error {
	return c.inTxSet(ctx, "", fn)
}

func (c sqlConn) inTxSet(ctx context.Context, set string, fn func(c conn) error) error {
	db, ok := c.q.(*sql.DB)
	if !ok {
		return fmt.Errorf("heraldpg: nested transaction")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, txIdleTimeout+"; "+set); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := fn(sqlConn{tx}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// queryRow scans the single row of a query; errNoRows when there is none.
func queryRow(ctx context.Context, c conn, sql string, args []any, dest ...any) error {
	found := false
	err := c.query(ctx, sql, args, func(scan func(...any) error) error {
		found = true
		return scan(dest...)
	})
	if err == nil && !found {
		return errNoRows
	}
	return err
}

var errNoRows = fmt.Errorf("heraldpg: no rows")
