package heraldpg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// eventsSQL reads whole rows, of every topic when $1 is empty, in insert
// order. Tests read through it (heraldtest): it is not meant for a large
// table, and $2 stops it one row past the most it may return so that the
// caller can tell a full read from a cut one.
const eventsSQL = `SELECT ` + eventColumns + ` FROM {{.Table}}
	WHERE cardinality($1::text[]) = 0 OR topic = ANY($1::text[])
	ORDER BY seq
	LIMIT $2`

// Reader reads outbox rows through a caller's transaction, so that a test
// sees the events the transaction wrote before it commits (and, in
// PostgreSQL's default isolation, the rows other transactions committed).
// heraldtest.RequireWrittenTx takes one. A Reader holds no connection and
// is safe for concurrent use.
type Reader[TTx any] struct {
	sql  string
	conn func(TTx) (conn, error)
}

// NewReader returns a Reader for pgx transactions on the outbox table cfg
// names.
func NewReader(cfg *Config) (*Reader[pgx.Tx], error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return &Reader[pgx.Tx]{sql: n.render(eventsSQL), conn: func(tx pgx.Tx) (conn, error) {
		if tx == nil {
			return nil, errors.New("heraldpg: EventsTx: tx is nil")
		}
		return pgxConn{tx}, nil
	}}, nil
}

// NewSQLReader returns a Reader for database/sql transactions on a pgx
// stdlib connection (driver name "pgx"), on the outbox table cfg names.
func NewSQLReader(cfg *Config) (*Reader[*sql.Tx], error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return &Reader[*sql.Tx]{sql: n.render(eventsSQL), conn: func(tx *sql.Tx) (conn, error) {
		if tx == nil {
			return nil, errors.New("heraldpg: EventsTx: tx is nil")
		}
		return sqlConn{tx}, nil
	}}, nil
}

// EventsTx returns the outbox rows tx sees, its own uncommitted ones
// included, in insert order: all of them, or those of the given topics. It
// fails rather than return more than 10,000 rows.
func (r *Reader[TTx]) EventsTx(ctx context.Context, tx TTx, topics ...string) ([]heraldadmin.EventRow, error) {
	c, err := r.conn(tx)
	if err != nil {
		return nil, err
	}
	return readEvents(ctx, c, r.sql, topics, sqlstore.MaxEventsRead)
}

// Events returns the committed outbox rows, in insert order: all of them,
// or those of the given topics. It is meant for tests (heraldtest.
// RequireWritten) and fails rather than return more than 10,000 rows.
func (d *Driver) Events(ctx context.Context, topics ...string) ([]heraldadmin.EventRow, error) {
	return readEvents(ctx, d.db, d.names.render(eventsSQL), topics, sqlstore.MaxEventsRead)
}

func readEvents(ctx context.Context, c conn, query string, topics []string, max int) ([]heraldadmin.EventRow, error) {
	if topics == nil {
		topics = []string{} // a NULL array would make cardinality() NULL
	}
	var out []heraldadmin.EventRow
	err := c.query(ctx, query, []any{topics, max + 1}, func(scan func(...any) error) error {
		ev, err := scanEvent(scan)
		out = append(out, ev)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: reading events: %w", err)
	}
	if len(out) > max {
		return nil, fmt.Errorf("heraldpg: %w", sqlstore.TooManyEvents(max, topics))
	}
	return out, nil
}
