package heraldpg_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
)

func TestReadEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TheTransactionSeesItsOwnRowsAndTheStoreOnlyCommittedOnes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.Write(herald.Message{Topic: "a", Payload: []byte("1")})
		r, err := heraldpg.NewReader(b.Config)
		require.NoError(t, err)
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, b.Writer.WriteTx(ctx, tx,
			herald.Message{Topic: "b", Payload: []byte("2")}, herald.Message{Topic: "a", Payload: []byte("3")}))

		rows, err := r.EventsTx(ctx, tx)
		require.NoError(t, err)
		require.Equal(t, []string{"1", "2", "3"}, payloads(rows), "in insert order")
		rows, err = r.EventsTx(ctx, tx, "a", "none")
		require.NoError(t, err)
		require.Equal(t, []string{"1", "3"}, payloads(rows))
		rows, err = b.Store.Events(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"1"}, payloads(rows))
		require.Equal(t, heraldadmin.StateReady, rows[0].State)
	})

	t.Run("ANilTransactionIsRefused", func(t *testing.T) {
		t.Parallel()
		r, err := heraldpg.NewReader(nil)
		require.NoError(t, err)
		_, err = r.EventsTx(ctx, pgx.Tx(nil))
		require.ErrorContains(t, err, "tx is nil")
		sr, err := heraldpg.NewSQLReader(nil)
		require.NoError(t, err)
		_, err = sr.EventsTx(ctx, (*sql.Tx)(nil))
		require.ErrorContains(t, err, "tx is nil")
	})

	t.Run("TheNamesAreChecked", func(t *testing.T) {
		t.Parallel()
		_, err := heraldpg.NewReader(&heraldpg.Config{Schema: "Bad-Name"})
		require.ErrorContains(t, err, "Config.Schema")
		_, err = heraldpg.NewSQLReader(&heraldpg.Config{Table: "Bad-Name"})
		require.ErrorContains(t, err, "Config.Table")
	})
}

func payloads(rows []heraldadmin.EventRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = string(r.Payload)
	}
	return out
}
