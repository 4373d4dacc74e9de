package heraldinbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
)

// ProcessClaimPgx is ProcessPgx for an event as a publisher package's Parse
// returned it, which may carry a claim check (see package heraldclaim): on
// a first delivery only, it resolves the payload from store, with its size
// and SHA-256 checked, and calls fn with the resolved event, in the same
// transaction as the inbox record. A duplicate fetches nothing. A payload
// that cannot be resolved rolls the transaction back, so a redelivery tries
// again; its error is returned (a *heraldclaim.MismatchError when the
// object does not match the reference). An event without a claim check is
// handed to fn as it is.
func (ib *Inbox) ProcessClaimPgx(ctx context.Context, db PgxBeginner, consumer string,
	store heraldclaim.ObjectStore, m herald.Message,
	fn func(ctx context.Context, tx pgx.Tx, m herald.Message) error) (processed bool, err error) {
	return ib.ProcessPgx(ctx, db, consumer, m.ID, func(ctx context.Context, tx pgx.Tx) error {
		resolved, err := resolve(ctx, store, m)
		if err != nil {
			return err
		}
		return fn(ctx, tx, resolved)
	})
}

// ProcessClaimSQL is ProcessClaimPgx for database/sql.
func (ib *Inbox) ProcessClaimSQL(ctx context.Context, db *sql.DB, consumer string,
	store heraldclaim.ObjectStore, m herald.Message,
	fn func(ctx context.Context, tx *sql.Tx, m herald.Message) error) (processed bool, err error) {
	return ib.ProcessSQL(ctx, db, consumer, m.ID, func(ctx context.Context, tx *sql.Tx) error {
		resolved, err := resolve(ctx, store, m)
		if err != nil {
			return err
		}
		return fn(ctx, tx, resolved)
	})
}

func resolve(ctx context.Context, store heraldclaim.ObjectStore, m herald.Message) (herald.Message, error) {
	if store == nil {
		if _, ok, _ := heraldclaim.RefOf(m.Headers); ok {
			return m, fmt.Errorf("heraldinbox: event %s carries a claim check and no object store was given", m.ID)
		}
		return m, nil
	}
	resolved, err := heraldclaim.Resolve(ctx, store, m)
	if err != nil {
		return m, fmt.Errorf("heraldinbox: %w", err)
	}
	return resolved, nil
}
