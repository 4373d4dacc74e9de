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
	ins := newInserter(q)
	var wc *herald.WriterConfig
	if cfg != nil {
		wc = &herald.WriterConfig{MaxPayloadBytes: cfg.MaxPayloadBytes}
	}
	return herald.NewWriter[Execer](execInserter{ins}, wc)
}

type execInserter struct{ *sqlstore.TupleInserter }

// InsertTx implements herald.WriteDriver with the statements of NewWriter's
// inserter, once tx is known to be a transaction.
func (e execInserter) InsertTx(ctx context.Context, tx Execer, msgs []herald.Message) error {
	if err := sqlstore.CheckTx(tx); err != nil {
		return fmt.Errorf("heraldsqlite: WriteTx: %w", err)
	}
	return e.Insert(ctx, tx, msgs)
}
