// Package heraldinbox is a stub of Herald's inbox.
package heraldinbox

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

type Inbox struct{}

type PgxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

func (ib *Inbox) ProcessPgx(ctx context.Context, db PgxBeginner, consumer, eventID string,
	fn func(ctx context.Context, tx pgx.Tx) error) (bool, error) {
	return false, nil
}

func (ib *Inbox) ProcessSQL(ctx context.Context, db *sql.DB, consumer, eventID string,
	fn func(ctx context.Context, tx *sql.Tx) error) (bool, error) {
	return false, nil
}
