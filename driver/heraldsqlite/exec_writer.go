package heraldsqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Execer is the part of a database/sql transaction that NewExecWriter's
// writer uses. ORMs that keep their *sql.Tx to themselves still pass it on
// through a value with this method, such as an *ent.Tx generated with
// --feature sql/execquery. sqlx and Bun expose the *sql.Tx (tx.Tx) for
// NewWriter. bun.Tx has an ExecContext too, but it rewrites the query for
// bun's own placeholders and drops the arguments: pass tx.Tx.
//
// Execer names an interface literal rather than defining a type, so that it
// is the same type as heraldpg.Execer: code written against one driver's
// *herald.Writer[Execer] takes the other's too.
type Execer = interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// NewExecWriter returns a writer that joins a caller's transaction through
// its ExecContext, for ORMs that hide the *sql.Tx:
//
//	tx, err := client.Tx(ctx) // ent, with --feature sql/execquery
//	...
//	err = w.WriteTx(ctx, tx, herald.Message{Topic: "orders", Payload: body})
//
// WriteTx refuses a value that is not a transaction (one without Commit and
// Rollback methods: *sql.DB, *sql.Conn, an ORM's pool or client), whose
// statements commit on their own: the event would outlive a business
// transaction that rolls back, which is what the outbox exists to prevent.
func NewExecWriter(cfg *Config) (*herald.Writer[Execer], error) {
	n, err := cfg.names()
	if err != nil {
		return nil, err
	}
	q := newQueries(n)
	ins := &inserter{prefix: q.insertPrefix, tuple: q.insertTuple}
	ins.full = ins.statement(rowsPerInsert)
	var wc *herald.WriterConfig
	if cfg != nil {
		wc = &herald.WriterConfig{MaxPayloadBytes: cfg.MaxPayloadBytes}
	}
	return herald.NewWriter[Execer](execInserter{ins}, wc)
}

type execInserter struct{ *inserter }

// InsertTx implements herald.WriteDriver with the statements of NewWriter's
// inserter, chunked the same way.
func (e execInserter) InsertTx(ctx context.Context, tx Execer, msgs []herald.Message) error {
	if err := sqlstore.CheckTx(tx); err != nil {
		return fmt.Errorf("heraldsqlite: WriteTx: %w", err)
	}
	for len(msgs) > 0 {
		chunk := msgs[:min(len(msgs), rowsPerInsert)]
		msgs = msgs[len(chunk):]
		args, err := insertArgs(chunk)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, e.statement(len(chunk)), args...); err != nil {
			return fmt.Errorf("heraldsqlite: writing %d events: %w", len(chunk), err)
		}
	}
	return nil
}

// insertArgs returns the parameters of chunk's tuples, in the order of
// the insert's columns.
func insertArgs(chunk []herald.Message) ([]any, error) {
	args := make([]any, 0, len(chunk)*insertColumns)
	for _, m := range chunk {
		h, err := encodeHeaders(m.Headers)
		if err != nil {
			return nil, err
		}
		args = append(args, m.ID, m.Topic, m.Key, m.Type, m.AggregateType, m.AggregateID,
			payload(m.Payload), h, availableAt(m.AvailableAt))
	}
	return args, nil
}
