package heraldpg_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

func TestWriteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitMakesTheRowExistWithEveryField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		ids := b.write(t, herald.Message{
			Topic: "orders", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			Payload: []byte{0, 1, 2, 0xff}, Headers: map[string]string{"X-Tenant": "acme"}, AvailableAt: at,
		})
		ev := b.row(t, ids[0])
		require.Equal(t, "orders", ev.Topic)
		require.Equal(t, "42", ev.Key, "key defaults to the aggregate id")
		require.Equal(t, "order.placed", ev.Type)
		require.Equal(t, "order", ev.AggregateType)
		require.Equal(t, []byte{0, 1, 2, 0xff}, ev.Payload)
		require.Equal(t, map[string]string{"X-Tenant": "acme"}, ev.Headers)
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.True(t, ev.AvailableAt.Equal(at), "available_at %v, want %v", ev.AvailableAt, at)
	})

	t.Run("RollbackWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{Topic: "t"}))
		require.NoError(t, tx.Rollback(ctx))
		require.Zero(t, b.count(t, "true"))
	})

	t.Run("SavepointRollbackWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		kept := herald.Message{ID: herald.NewID(), Topic: "kept"}
		require.NoError(t, b.writer.WriteTx(ctx, tx, kept))
		sp, err := tx.Begin(ctx) // a savepoint
		require.NoError(t, err)
		require.NoError(t, b.writer.WriteTx(ctx, sp, herald.Message{Topic: "undone"}))
		require.NoError(t, sp.Rollback(ctx))
		require.NoError(t, tx.Commit(ctx))
		require.Equal(t, 1, b.count(t, "true"))
		require.Equal(t, 1, b.count(t, "id = $1", kept.ID))
	})

	t.Run("ConstraintErrorAfterTheInsertWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `CREATE TABLE `+b.cfg.Schema+`.orders (id int PRIMARY KEY)`)
		require.NoError(t, err)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO `+b.cfg.Schema+`.orders VALUES (1)`)
		require.NoError(t, err)
		require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{Topic: "t"}))
		_, err = tx.Exec(ctx, `INSERT INTO `+b.cfg.Schema+`.orders VALUES (1)`)
		require.Error(t, err, "duplicate key")
		require.Error(t, tx.Commit(ctx), "an aborted transaction cannot commit")
		require.Zero(t, b.count(t, "true"))
	})

	t.Run("PanicInsideTheTransactionWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		func() {
			defer func() { require.NotNil(t, recover()) }()
			_ = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{Topic: "t"}))
				panic("handler bug")
			})
		}()
		require.Zero(t, b.count(t, "true"))
	})

	t.Run("InvalidMessageWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		err = b.writer.WriteTx(ctx, tx, herald.Message{Topic: "ok"}, herald.Message{Topic: ""})
		var ve *herald.ValidationError
		require.True(t, errors.As(err, &ve), "got %v", err)
		require.Equal(t, 1, ve.Index)
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM `+b.table).Scan(&n))
		require.Zero(t, n, "the valid message of the call must not be written either")
	})

	t.Run("PayloadCapIsConfigurable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w, err := heraldpg.NewWriter(&heraldpg.Config{Schema: b.cfg.Schema, MaxPayloadBytes: 8})
		require.NoError(t, err)
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		require.NoError(t, w.WriteTx(ctx, tx, herald.Message{Topic: "t", Payload: make([]byte, 8)}))
		require.ErrorIs(t, w.WriteTx(ctx, tx, herald.Message{Topic: "t", Payload: make([]byte, 9)}), herald.ErrInvalidMessage)
	})

	t.Run("DatabaseSQLTransactionCommitsAndRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		db := stdlib.OpenDBFromPool(b.pool)
		defer db.Close()
		w, err := heraldpg.NewSQLWriter(b.cfg)
		require.NoError(t, err)

		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		id := herald.NewID()
		require.NoError(t, w.WriteTx(ctx, tx, herald.Message{ID: id, Topic: "t", Payload: []byte("x")},
			herald.Message{Topic: "t2", Headers: map[string]string{"A": "b"}}))
		require.NoError(t, tx.Commit())

		tx, err = db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, w.WriteTx(ctx, tx, herald.Message{Topic: "gone"}))
		require.NoError(t, tx.Rollback())

		require.Equal(t, 2, b.count(t, "true"))
		require.Equal(t, []byte("x"), b.row(t, id).Payload)
	})

	t.Run("ManyMessagesCostOneRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var statements atomic.Int64
		cfg, err := pgxpool.ParseConfig(heraldtest.PostgresDSN(t))
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
		require.NoError(t, b.writer.WriteTx(ctx, tx, msgs...))
		require.Equal(t, int64(1), statements.Load()-before, "pgx: statements sent for 100 messages")
		require.NoError(t, tx.Commit(ctx))

		db := stdlib.OpenDBFromPool(pool)
		defer db.Close()
		w, err := heraldpg.NewSQLWriter(b.cfg)
		require.NoError(t, err)
		stx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		before = statements.Load()
		require.NoError(t, w.WriteTx(ctx, stx, msgs...))
		require.Equal(t, int64(1), statements.Load()-before, "database/sql: statements sent for 100 messages")
		require.NoError(t, stx.Commit())
		require.Equal(t, 200, b.count(t, "true"))
	})

	t.Run("PlainSQLInsertOfTheContractIsRelayed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `CREATE TABLE `+b.cfg.Schema+`.orders (id text PRIMARY KEY, total int)`)
		require.NoError(t, err)
		// What a program in another language does: its business row and the
		// README's minimal outbox insert, in one transaction.
		tx, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO `+b.cfg.Schema+`.orders VALUES ('order-42', 4200)`)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SET LOCAL search_path TO `+b.cfg.Schema)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO herald_outbox (topic, key, payload) VALUES ('orders', 'order-42', '{"total":4200}')`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))

		var id string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM `+b.table).Scan(&id))
		rec := newRecorder()
		b.startRelay(t, rec, nil)
		requireAllDeliveredOnce(t, rec, []string{id})
		env := rec.env(id)
		require.Equal(t, "orders", env.Topic)
		require.Equal(t, "order-42", env.Key)
		require.Equal(t, `{"total":4200}`, string(env.Payload))
		require.Eventually(t, func() bool { return b.row(t, id).State == heraldadmin.StatePublished }, 10*time.Second, 5*time.Millisecond)
	})

	t.Run("NilTransactionIsAnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Error(t, b.writer.WriteTx(ctx, nil, herald.Message{Topic: "t"}))
		w, err := heraldpg.NewSQLWriter(b.cfg)
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
