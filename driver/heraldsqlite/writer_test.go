package heraldsqlite_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

func TestWriteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SavepointRollbackWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.DB.BeginTx(ctx, nil)
		require.NoError(t, err)
		kept := herald.Message{ID: herald.NewID(), Topic: "kept"}
		require.NoError(t, b.Writer.WriteTx(ctx, tx, kept))
		_, err = tx.ExecContext(ctx, `SAVEPOINT sp`)
		require.NoError(t, err)
		require.NoError(t, b.Writer.WriteTx(ctx, tx, herald.Message{Topic: "undone"}))
		_, err = tx.ExecContext(ctx, `ROLLBACK TO sp`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		require.Equal(t, 1, b.count(t, "true"))
		require.Equal(t, 1, b.count(t, "id = ?", kept.ID))
	})

	t.Run("NilTxIsRefused", func(t *testing.T) {
		t.Parallel()
		w, err := heraldsqlite.NewWriter(nil)
		require.NoError(t, err)
		require.ErrorContains(t, w.WriteTx(ctx, nil, herald.Message{Topic: "t"}), "tx is nil")
	})
}

// The documented contract for programs in other languages (topic, key and
// payload, every other column left to its default) is heralddrivertest's
// PlainSQLInsertIsClaimable on every driver. Here, what SQLite's schema
// does on its own: random ids from a SQL expression, and the CHECK
// constraints that stand in for PostgreSQL's types.
func TestPlainSQLContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DefaultIDsAreDistinct", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
			INSERT INTO herald_outbox (topic, payload) SELECT 't', x'00' FROM n`)
		require.Equal(t, 1000, b.count(t, "true"))
		var distinct int
		require.NoError(t, b.DB.QueryRow(`SELECT count(DISTINCT id) FROM herald_outbox`).Scan(&distinct))
		require.Equal(t, 1000, distinct)
	})

	t.Run("MistakesAreRefusedByConstraints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, stmt := range []string{
			`INSERT INTO herald_outbox (topic, payload) VALUES ('', 'x')`,
			`INSERT INTO herald_outbox (topic) VALUES ('t')`,
			`INSERT INTO herald_outbox (topic, payload, headers) VALUES ('t', 'x', '[1]')`,
			`INSERT INTO herald_outbox (topic, payload, headers) VALUES ('t', 'x', 'not json')`,
			`INSERT INTO herald_outbox (topic, payload, available_at) VALUES ('t', 'x', '2030-01-01')`,
			`INSERT INTO herald_outbox (id, topic, payload) VALUES ('not-a-uuid', 't', 'x')`,
			`INSERT INTO herald_outbox (id, topic, payload) VALUES ('` + strings.ToUpper(herald.NewID()) + `', 't', 'x')`,
			`INSERT INTO herald_outbox (topic, payload, state) VALUES ('t', 'x', 'done')`,
		} {
			_, err := b.DB.ExecContext(ctx, stmt)
			require.ErrorContains(t, err, "constraint failed", stmt)
		}
		require.Zero(t, b.count(t, "true"))
	})
}

// BenchmarkWriteTx measures producer transactions of 1 and 100 events, each
// committed on its own.
func BenchmarkWriteTx(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			bu := setup(b)
			msgs := make([]herald.Message, size)
			for i := range msgs {
				msgs[i] = herald.Message{Topic: "orders", Key: "k", Payload: []byte(`{"total":4200}`)}
			}
			ctx := context.Background()
			for b.Loop() {
				tx, err := bu.DB.BeginTx(ctx, nil)
				require.NoError(b, err)
				require.NoError(b, bu.Writer.WriteTx(ctx, tx, msgs...))
				require.NoError(b, tx.Commit())
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
