package heraldsqlite_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/driver/internal/sqlitetest"
)

// The ORM examples (examples/orm) run NewExecWriter through ent; these
// tests pin what it promises whatever the ORM: it joins the transaction it
// is given, and refuses what is not one.
func TestExecWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitWritesTheEventAndTheBusinessRow", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldsqlite.Config{})
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
		e := execSetup(t, heraldsqlite.Config{})
		tx, err := e.Driver.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, tx.Record(ctx, "order-1"))
		require.NoError(t, tx.Write(ctx, herald.Message{Topic: "orders"}, herald.Message{Topic: "audit"}))
		require.NoError(t, tx.Rollback(ctx))

		require.Empty(t, e.businessRows(t))
		require.Empty(t, e.Counts())
	})

	// More messages than one INSERT carries take several statements of the
	// same transaction, in the order of the call.
	t.Run("ManyMessagesKeepTheirOrder", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldsqlite.Config{})
		msgs := make([]herald.Message, 300)
		for i := range msgs {
			msgs[i] = herald.Message{Topic: "t"}
		}
		ids := e.Write(msgs...)
		_, envs := e.Claim(len(msgs), time.Minute)
		got := make([]string, len(envs))
		for i, env := range envs {
			got[i] = env.ID
		}
		require.Equal(t, ids, got)
	})

	t.Run("InvalidMessageWritesNothing", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldsqlite.Config{MaxPayloadBytes: 8})
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
		e := execSetup(t, heraldsqlite.Config{})
		conn, err := e.DB.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		for _, notTx := range []heraldsqlite.Execer{e.DB, conn, struct{ *sql.DB }{e.DB}} {
			err := e.Writer.WriteTx(ctx, notTx, herald.Message{Topic: "t"})
			require.ErrorContains(t, err, "is not a transaction")
		}
		// Without the check, each write would have committed on its own.
		require.Empty(t, e.Counts())
	})

	t.Run("NilIsRefused", func(t *testing.T) {
		t.Parallel()
		w, err := heraldsqlite.NewExecWriter(nil)
		require.NoError(t, err)
		require.ErrorContains(t, w.WriteTx(ctx, nil, herald.Message{Topic: "t"}), "tx is nil")
		require.ErrorContains(t, w.WriteTx(ctx, (*sql.Tx)(nil), herald.Message{Topic: "t"}), "tx is a nil *sql.Tx")
	})

	// An ORM's transaction type that embeds *sql.Tx, as *sqlx.Tx does, has
	// its Commit and Rollback too.
	t.Run("TypesEmbeddingATransactionAreAccepted", func(t *testing.T) {
		t.Parallel()
		e := execSetup(t, heraldsqlite.Config{})
		tx, err := e.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		type ormTx struct{ *sql.Tx }
		require.NoError(t, e.Writer.WriteTx(ctx, &ormTx{tx}, herald.Message{Topic: "t"}))
		require.NoError(t, tx.Commit())
		require.Equal(t, map[string]int64{"t/ready": 1}, e.Counts())
	})

	t.Run("ConfigIsValidated", func(t *testing.T) {
		t.Parallel()
		_, err := heraldsqlite.NewExecWriter(&heraldsqlite.Config{Table: "sqlite_outbox"})
		require.ErrorContains(t, err, "sqlite_")
		_, err = heraldsqlite.NewExecWriter(&heraldsqlite.Config{MaxPayloadBytes: -1})
		require.ErrorContains(t, err, "MaxPayloadBytes")
	})
}

// execOutbox is an outbox whose transactions write their events with
// NewExecWriter, beside sqlitetest's orders table.
type execOutbox struct {
	*heralddrivertest.Kit
	Driver *heralddrivertest.Driver
	DB     *sql.DB
	Writer *herald.Writer[heraldsqlite.Execer]
}

func execSetup(t *testing.T, cfg heraldsqlite.Config) *execOutbox {
	t.Helper()
	o := sqlitetest.New(t, cfg)
	w, err := heraldsqlite.NewExecWriter(&cfg)
	require.NoError(t, err)
	d := o.Driver
	d.Begin = func(ctx context.Context) (heralddrivertest.Tx, error) {
		tx, err := o.DB.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return execTx{tx: tx, w: w}, nil
	}
	return &execOutbox{Kit: heralddrivertest.NewKit(t, d), Driver: d, DB: o.DB, Writer: w}
}

func (e *execOutbox) businessRows(t *testing.T) []string {
	t.Helper()
	rows, err := e.Driver.BusinessRows(t.Context())
	require.NoError(t, err)
	return rows
}

type execTx struct {
	tx *sql.Tx
	w  *herald.Writer[heraldsqlite.Execer]
}

func (x execTx) Write(ctx context.Context, msgs ...herald.Message) error {
	return x.w.WriteTx(ctx, x.tx, msgs...)
}

func (x execTx) Record(ctx context.Context, id string) error {
	_, err := x.tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id)
	return err
}

func (x execTx) Commit(context.Context) error   { return x.tx.Commit() }
func (x execTx) Rollback(context.Context) error { return x.tx.Rollback() }
