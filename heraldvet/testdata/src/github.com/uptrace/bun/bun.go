// Package bun is a stub of github.com/uptrace/bun.
package bun

import (
	"context"
	"database/sql"
)

type DB struct{}

type Tx struct{}

func (db *DB) RunInTx(ctx context.Context, opts *sql.TxOptions, fn func(ctx context.Context, tx Tx) error) error {
	return nil
}
func (db *DB) BeginTx(ctx context.Context, opts *sql.TxOptions) (Tx, error) { return Tx{}, nil }
func (tx Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return nil, nil
}
func (tx Tx) Commit() error { return nil }
