// Package sqlx is a stub of github.com/jmoiron/sqlx.
package sqlx

import (
	"context"
	"database/sql"
)

type DB struct{ *sql.DB }

type Tx struct{ *sql.Tx }

func (db *DB) Beginx() (*Tx, error)                                        { return nil, nil }
func (db *DB) BeginTxx(ctx context.Context, o *sql.TxOptions) (*Tx, error) { return nil, nil }
func (db *DB) MustBegin() *Tx                                              { return nil }
func (tx *Tx) NamedExecContext(ctx context.Context, query string, arg any) (sql.Result, error) {
	return nil, nil
}
