package heraldpg_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The ORM examples (examples/orm) run NewExecWriter through GORM and ent;
// these tests pin what it promises whatever the ORM: it joins the
// transaction it is given, and refuses what is not one.
func TestExecWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitWritesTheEventAndTheBusinessRow", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldpg.Config{})
		tx, err := e.Driver.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.Record(ctx, "order-1"))
		m := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "order-1", Payload: []byte(`{"total":4200}`)}
		require.NoError(t, tx.Write(ctx, m))
		require.NoError(t, tx.Commit(ctx))

		require.Equal(t, []string{"order-1"}, e.businessRows(t))
		require.Equal(t, map[string]int64{"orders/ready": 1}, e.Counts())
		row := e.Get(m.ID)
		require.Equal(t, "order-1", row.Key)
		require.JSONEq(t, `{"total":4200}`, string(row.Payload))
	})

	t.Run("RollbackLeavesNothing", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldpg.Config{})
		tx, err := e.Driver.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.Record(ctx, "order-1"))
		// Two messages take the array statement, one the VALUES one: both
		// must join the transaction.
		require.NoError(t, tx.Write(ctx, herald.Message{Topic: "orders"}))
		require.NoError(t, tx.Write(ctx, herald.Message{Topic: "orders"}, herald.Message{Topic: "audit"}))
		require.NoError(t, tx.Rollback(ctx))

		require.Empty(t, e.businessRows(t))
		require.Empty(t, e.Counts())
	})

	t.Run("ManyMessagesKeepTheirOrder", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldpg.Config{})
		ids := e.Write(herald.Message{Topic: "t"}, herald.Message{Topic: "t"}, herald.Message{Topic: "t"})
		_, envs := e.Claim(10, time.Minute)
		got := make([]string, len(envs))
		for i, env := range envs {
			got[i] = env.ID
		}
		require.Equal(t, ids, got)
	})

	t.Run("InvalidMessageWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldpg.Config{MaxPayloadBytes: 8})
		for field, bad := range map[string]herald.Message{
			"topic":   {},
			"payload": {Topic: "t", Payload: []byte("123456789")}, // over Config.MaxPayloadBytes
		} {
			err := e.Driver.Write(ctx, []herald.Message{{Topic: "t"}, bad}, true)
			var ve *herald.ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, field, ve.Field)
		}
		require.Empty(t, e.Counts(), "the valid message of each call was not written either")
	})

	t.Run("PoolsAndConnectionsAreRefused", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldpg.Config{})
		conn, err := e.DB.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		for _, notTx := range []heraldpg.Execer{e.DB, conn, struct{ *sql.DB }{e.DB}} {
			err := e.Writer.WriteTx(ctx, notTx, herald.Message{Topic: "t"})
			require.ErrorContains(t, err, "is not a transaction")
		}
		// Without the check, each write would have committed on its own.
		require.Empty(t, e.Counts())
	})

	t.Run("NilIsRefused", func(t *testing.T) {
		t.Parallel()
		w, err := heraldpg.NewExecWriter(nil)
		require.NoError(t, err)
		require.ErrorContains(t, w.WriteTx(ctx, nil, herald.Message{Topic: "t"}), "tx is nil")
		require.ErrorContains(t, w.WriteTx(ctx, (*sql.Tx)(nil), herald.Message{Topic: "t"}), "tx is a nil *sql.Tx")
	})

	// An ORM's transaction type that embeds *sql.Tx, as *sqlx.Tx does, has
	// its Commit and Rollback too.
	t.Run("TypesEmbeddingATransactionAreAccepted", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldpg.Config{})
		tx, err := e.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		type ormTx struct{ *sql.Tx }
		require.NoError(t, e.Writer.WriteTx(ctx, &ormTx{tx}, herald.Message{Topic: "t"}))
		require.NoError(t, tx.Commit())
		require.Equal(t, map[string]int64{"t/ready": 1}, e.Counts())
	})

	t.Run("ConfigIsValidated", func(t *testing.T) {
		t.Parallel()
		_, err := heraldpg.NewExecWriter(&heraldpg.Config{Schema: "no spaces"})
		require.Error(t, err)
		_, err = heraldpg.NewExecWriter(&heraldpg.Config{MaxPayloadBytes: -1})
		require.ErrorContains(t, err, "MaxPayloadBytes")
	})
}

// execOutbox is an outbox over database/sql whose transactions write their
// events with NewExecWriter, beside pgtest's orders table.
type execOutbox struct {
	*heralddrivertest.Kit
	Driver *heralddrivertest.Driver
	DB     *sql.DB
	Writer *herald.Writer[heraldpg.Execer]
}

func execSetup(t *testing.T, cfg heraldpg.Config) *execOutbox {
	t.Helper()
	db := stdlib.OpenDBFromPool(testenv.PostgresPool(t))
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	cfg.Schema = testenv.Schema(t)
	d := pgtest.NewSQL(t, db, cfg)
	w, err := heraldpg.NewExecWriter(&cfg)
	require.NoError(t, err)
	record := `INSERT INTO ` + cfg.Schema + `.orders (id) VALUES ($1)`
	d.Begin = func(ctx context.Context) (heralddrivertest.Tx, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return execTx{tx: tx, w: w, record: record}, nil
	}
	return &execOutbox{Kit: heralddrivertest.NewKit(t, d), Driver: d, DB: db, Writer: w}
}

func (e *execOutbox) businessRows(t *testing.T) []string {
	t.Helper()
	rows, err := e.Driver.BusinessRows(t.Context())
	require.NoError(t, err)
	return rows
}

type execTx struct {
	tx     *sql.Tx
	w      *herald.Writer[heraldpg.Execer]
	record string
}

func (x execTx) Write(ctx context.Context, msgs ...herald.Message) error {
	return x.w.WriteTx(ctx, x.tx, msgs...)
}

func (x execTx) Record(ctx context.Context, id string) error {
	_, err := x.tx.ExecContext(ctx, x.record, id)
	return err
}

func (x execTx) Commit(context.Context) error   { return x.tx.Commit() }
func (x execTx) Rollback(context.Context) error { return x.tx.Rollback() }
