package heraldpg

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Execer is the part of a database/sql transaction that NewExecWriter's
// writer uses. ORMs that keep their *sql.Tx to themselves still pass it on
// through a value with this method:
//
//   - GORM: tx.Statement.ConnPool inside db.Transaction
//   - ent: the *ent.Tx itself, when generated with --feature sql/execquery
//   - sqlx: *sqlx.Tx (or its *sql.Tx, tx.Tx, for NewSQLWriter)
//
// bun.Tx has an ExecContext too, but it rewrites the query for bun's own
// placeholders and drops the arguments: pass its *sql.Tx (tx.Tx) to
// NewSQLWriter instead.
//
// Execer names an interface literal rather than defining a type, so that it
// is the same type as heraldsqlite.Execer: code written against one driver's
// *herald.Writer[Execer] takes the other's too.
type Execer = interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// NewExecWriter returns a writer that joins a caller's transaction through
// its ExecContext, on a pgx stdlib connection (driver name "pgx"), for ORMs
// that hide the *sql.Tx:
//
//	err := db.Transaction(func(tx *gorm.DB) error {
//		...
//		return w.WriteTx(ctx, tx.Statement.ConnPool, herald.Message{Topic: "orders", Payload: body})
//	})
//
// WriteTx refuses a value that is not a transaction (one without Commit and
// Rollback methods: *sql.DB, *sql.Conn, an ORM's pool or client), whose
// statements commit on their own: the event would outlive a business
// transaction that rolls back, which is what the outbox exists to prevent.
func NewExecWriter(cfg *Config) (*herald.Writer[Execer], error) {
	ins, err := newInserter(cfg)
	if err != nil {
		return nil, err
	}
	return herald.NewWriter[Execer](execInserter{ins}, writerConfig(cfg))
}

type execInserter struct{ inserter }

func (e execInserter) InsertTx(ctx context.Context, tx Execer, msgs []herald.Message) error {
	if err := sqlstore.CheckTx(tx); err != nil {
		return fmt.Errorf("heraldpg: WriteTx: %w", err)
	}
	return e.execTx(ctx, tx, msgs)
}
