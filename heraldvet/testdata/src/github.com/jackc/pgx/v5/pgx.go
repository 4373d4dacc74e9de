// Package pgx is a stub of github.com/jackc/pgx/v5.
package pgx

import "context"

type CommandTag struct{}

type Rows interface{ Close() }

type Row interface{ Scan(dest ...any) error }

type Batch struct{}

type BatchResults interface{ Close() error }

type TxOptions struct{}

type Tx interface {
	Begin(ctx context.Context) (Tx, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
	Exec(ctx context.Context, sql string, args ...any) (CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) Row
	SendBatch(ctx context.Context, b *Batch) BatchResults
}

type Conn struct{}

func (c *Conn) Begin(ctx context.Context) (Tx, error)                { return nil, nil }
func (c *Conn) BeginTx(ctx context.Context, o TxOptions) (Tx, error) { return nil, nil }
func (c *Conn) Exec(ctx context.Context, sql string, args ...any) (CommandTag, error) {
	return CommandTag{}, nil
}

type beginner interface {
	Begin(ctx context.Context) (Tx, error)
}

func BeginFunc(ctx context.Context, db beginner, fn func(Tx) error) error { return nil }

func BeginTxFunc(ctx context.Context, db beginner, o TxOptions, fn func(Tx) error) error { return nil }
