package heraldpg

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimTx is the transaction of an ordered claim. Its queries run in
// order; the last one commits the transaction.
type claimTx interface {
	querier
	// last runs the transaction's last query and commits.
	last(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error
}

// inClaimTx runs fn in one transaction begun with the settings in set.
// On a pgx pool, the transaction sends BEGIN and its settings with its
// first query and COMMIT with its last, on one connection: an ordered
// claim (a walk, then the claim of what it found) costs two round trips
// instead of four. Every round trip counts on a busy machine, where each
// waits to be scheduled twice; the claim is on the path of every event.
// A database/sql pool runs the statements one by one.
func (d *Driver) inClaimTx(ctx context.Context, set string, fn func(tx claimTx) error) error {
	if pc, ok := d.db.(pgxConn); ok && !d.serialClaims {
		if pool, ok := pc.q.(*pgxpool.Pool); ok {
			return pipelined(ctx, pool, set, fn)
		}
	}
	return d.db.inTxSet(ctx, set, func(c conn) error { return fn(serialTx{c}) })
}

// querier runs a query and calls each once per row.
type querier interface {
	query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error
}

// serialTx is a claimTx whose last query is like the others: the
// transaction commits when fn returns.
type serialTx struct{ conn }

func (t serialTx) last(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	return t.query(ctx, sql, args, each)
}

// pipelineTx is a transaction on one pooled connection whose statements
// go out with the next query: BEGIN and the settings before the first,
// COMMIT after the last.
type pipelineTx struct {
	c       *pgxpool.Conn
	pending []string // statements not sent yet, run before the next query
	ended   bool     // COMMIT went out with the last query
}

func pipelined(ctx context.Context, pool *pgxpool.Pool, set string, fn func(tx claimTx) error) (err error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left in a transaction (an error, a cancelled context)
	// is closed by the pool on release instead of being reused.
	defer c.Release()
	t := &pipelineTx{c: c, pending: beginStatements(set)}
	if err = fn(t); err != nil {
		t.rollback(ctx)
		return err
	}
	// Done when COMMIT went with the last query, or when fn ran no query
	// (there is no transaction).
	if t.ended || t.pending != nil {
		return nil
	}
	_, err = c.Exec(ctx, "COMMIT")
	return err
}

// beginStatements is BEGIN, the idle timeout and the settings in set, one
// statement each, as a pipeline needs them.
func beginStatements(set string) []string {
	out := []string{"BEGIN", txIdleTimeout}
	for s := range strings.SplitSeq(set, ";") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// rollback ends a transaction that failed. The error is not worth
// returning: a connection still in a transaction is closed on release.
func (t *pipelineTx) rollback(ctx context.Context) {
	if t.pending != nil || t.c.Conn().IsClosed() {
		return
	}
	rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, _ = t.c.Exec(rbCtx, "ROLLBACK")
}

func (t *pipelineTx) send(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error, commit bool) error {
	b := &pgx.Batch{}
	for _, s := range t.pending {
		b.Queue(s)
	}
	t.pending = nil
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			if err := each(rows.Scan); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if commit {
		b.Queue("COMMIT")
	}
	// An error from each comes after the server ran the whole batch: a
	// claim's rows may then be claimed with the error returned, which
	// the relay treats as a claim whose answer was lost (released by
	// its token).
	if err := t.c.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	t.ended = commit
	return nil
}

func (t *pipelineTx) query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	return t.send(ctx, sql, args, each, false)
}

func (t *pipelineTx) last(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	return t.send(ctx, sql, args, each, true)
}

// lastQuery runs a claimTx's last query as a querier.
type lastQuery struct{ tx claimTx }

func (q lastQuery) query(ctx context.Context, sql string, args []any, each func(scan func(dest ...any) error) error) error {
	return q.tx.last(ctx, sql, args, each)
}
