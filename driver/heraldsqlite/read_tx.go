package heraldsqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// eventsSQL reads whole rows, of every topic when ?1 is NULL or of the
// topics in the JSON array ?1, in insert order. Tests read through it
// (heraldtest): it is not meant for a large table, and ?2 stops it one row
// past the most it may return so that the caller can tell a full read from
// a cut one.
const eventsSQL = `SELECT ` + eventColumns + ` FROM {{.Table}}
	WHERE ?1 IS NULL OR topic IN (SELECT value FROM json_each(?1))
	ORDER BY seq
	LIMIT ?2`

// Reader reads outbox rows through a caller's transaction, so that a test
// sees the events the transaction wrote before it commits.
// heraldtest.RequireWrittenTx takes one. A Reader holds no connection and
// is safe for concurrent use.
type Reader struct {
	sql string
}

// NewReader returns a Reader on the outbox table cfg names.
func NewReader(cfg *Config) (*Reader, error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	return &Reader{sql: n.render(eventsSQL)}, nil
}

// EventsTx returns the outbox rows tx sees, its own uncommitted ones
// included, in insert order: all of them, or those of the given topics. It
// fails rather than return more than 10,000 rows.
func (r *Reader) EventsTx(ctx context.Context, tx *sql.Tx, topics ...string) ([]heraldadmin.EventRow, error) {
	if tx == nil {
		return nil, errors.New("heraldsqlite: EventsTx: tx is nil")
	}
	return readEvents(ctx, tx, r.sql, topics, sqlstore.MaxEventsRead)
}

// Events returns the committed outbox rows, in insert order: all of them,
// or those of the given topics. It is meant for tests (heraldtest.
// RequireWritten) and fails rather than return more than 10,000 rows.
func (d *Driver) Events(ctx context.Context, topics ...string) ([]heraldadmin.EventRow, error) {
	return readEvents(ctx, d.db, d.names.render(eventsSQL), topics, sqlstore.MaxEventsRead)
}

// rowsQuerier is what a *sql.DB and a *sql.Tx have in common for reading.
type rowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func readEvents(ctx context.Context, q rowsQuerier, query string, topics []string, max int) ([]heraldadmin.EventRow, error) {
	var filter any // NULL: every topic
	if len(topics) > 0 {
		b, err := json.Marshal(topics)
		if err != nil {
			return nil, fmt.Errorf("heraldsqlite: reading events: %w", err)
		}
		filter = string(b)
	}
	rows, err := q.QueryContext(ctx, query, filter, max+1)
	if err != nil {
		return nil, fmt.Errorf("heraldsqlite: reading events: %w", err)
	}
	defer rows.Close()
	var out []heraldadmin.EventRow
	for rows.Next() {
		ev, err := scanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("heraldsqlite: reading events: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heraldsqlite: reading events: %w", err)
	}
	if len(out) > max {
		return nil, fmt.Errorf("heraldsqlite: %w", sqlstore.TooManyEvents(max, topics))
	}
	return out, nil
}
