package heraldpg_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestWriteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SavepointRollbackWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		kept := herald.Message{ID: herald.NewID(), Topic: "kept"}
		require.NoError(t, b.Writer.WriteTx(ctx, tx, kept))
		sp, err := tx.Begin(ctx) // a savepoint
		require.NoError(t, err)
		require.NoError(t, b.Writer.WriteTx(ctx, sp, herald.Message{Topic: "undone"}))
		require.NoError(t, sp.Rollback(ctx))
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, map[string]int64{"kept/ready": 1}, b.Counts())
		b.Get(kept.ID)
	})

	// On every driver, an application that rolls back after a failed
	// business write leaves nothing (heralddrivertest's
	// EventsCommitAndVanishWithTheirBusinessRows). On PostgreSQL it has no
	// other choice: the failed statement aborted the transaction.
	t.Run("ConstraintErrorAfterTheInsertWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		orders := b.Config.Schema + `.orders` // pgtest's business table
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO `+orders+` VALUES ('order-1')`)
		require.NoError(t, err)
		require.NoError(t, b.Writer.WriteTx(ctx, tx, herald.Message{Topic: "t"}))
		_, err = tx.Exec(ctx, `INSERT INTO `+orders+` VALUES ('order-1')`)
		require.Error(t, err, "duplicate key")
		require.Error(t, tx.Commit(ctx), "an aborted transaction cannot commit")
		require.Empty(t, b.Counts())
	})

	t.Run("PanicInsideTheTransactionWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		func() {
			defer func() { require.NotNil(t, recover()) }()
			_ = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
				require.NoError(t, b.Writer.WriteTx(ctx, tx, herald.Message{Topic: "t"}))
				panic("handler bug")
			})
		}()
		require.Empty(t, b.Counts())
	})

	t.Run("ManyMessagesCostOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var statements atomic.Int64
		cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
		require.NoError(t, err)
		cfg.ConnConfig.Tracer = countingTracer{&statements}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer pool.Close()

		msgs := make([]herald.Message, 100)
		for i := range msgs {
			msgs[i] = herald.Message{Topic: "t", Payload: []byte("p")}
		}
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		before := statements.Load()
		require.NoError(t, b.Writer.WriteTx(ctx, tx, msgs...))
		require.Equal(t, int64(1), statements.Load()-before, "pgx: statements sent for 100 messages")
		require.NoError(t, tx.Commit(ctx))

		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		w, err := heraldpg.NewSQLWriter(b.Config)
		require.NoError(t, err)
		stx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		before = statements.Load()
		require.NoError(t, w.WriteTx(ctx, stx, msgs...))
		require.Equal(t, int64(1), statements.Load()-before, "database/sql: statements sent for 100 messages")
		require.NoError(t, stx.Commit())
		require.Equal(t, map[string]int64{"t/ready": 200}, b.Counts())
	})

	t.Run("NilTransactionIsAnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Error(t, b.Writer.WriteTx(ctx, nil, herald.Message{Topic: "t"}))
		w, err := heraldpg.NewSQLWriter(b.Config)
		require.NoError(t, err)
		require.Error(t, w.WriteTx(ctx, (*sql.Tx)(nil), herald.Message{Topic: "t"}))
	})
}

type countingTracer struct{ n *atomic.Int64 }

func (c countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
