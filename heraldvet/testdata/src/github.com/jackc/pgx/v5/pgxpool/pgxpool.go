// Package pgxpool is a stub of github.com/jackc/pgx/v5/pgxpool.
package pgxpool

import (
	"context"

	"github.com/jackc/pgx/v5"
)

type Pool struct{}

func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error)                    { return nil, nil }
func (p *Pool) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) { return nil, nil }
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgx.CommandTag, error) {
	return pgx.CommandTag{}, nil
}
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row { return nil }

type Tx struct{}

func (tx *Tx) Commit(ctx context.Context) error { return nil }
func (tx *Tx) Exec(ctx context.Context, sql string, args ...any) (pgx.CommandTag, error) {
	return pgx.CommandTag{}, nil
}
