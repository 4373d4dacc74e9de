package heraldsqlite_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
)

func TestWriteTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CommitMakesTheRowExistWithEveryField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
		before := time.Now().Add(-time.Second)
		ids := b.write(t, herald.Message{
			Topic: "orders", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			Payload: []byte{0, 1, 2, 0xff}, Headers: map[string]string{"X-Tenant": "acme"}, AvailableAt: at,
		})
		ev := b.row(t, ids[0])
		require.Equal(t, ids[0], ev.ID)
		require.Equal(t, "orders", ev.Topic)
		require.Equal(t, "42", ev.Key, "key defaults to the aggregate id")
		require.Equal(t, "order.placed", ev.Type)
		require.Equal(t, "order", ev.AggregateType)
		require.Equal(t, "42", ev.AggregateID)
		require.Equal(t, []byte{0, 1, 2, 0xff}, ev.Payload)
		require.Equal(t, map[string]string{"X-Tenant": "acme"}, ev.Headers)
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Zero(t, ev.Attempt)
		require.True(t, ev.AvailableAt.Equal(at), "available_at %v, want %v", ev.AvailableAt, at)
		require.WithinRange(t, ev.CreatedAt, before, time.Now().Add(time.Second))
		require.Nil(t, ev.LeaseUntil)
		require.Nil(t, ev.PublishedAt)
		require.Nil(t, ev.DeadAt)
	})

	t.Run("EmptyPayloadIsNotNull", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"})
		require.Empty(t, b.row(t, ids[0]).Payload)
	})

	t.Run("RollbackWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{Topic: "t"}, herald.Message{Topic: "u"}))
		require.NoError(t, tx.Rollback())
		require.Zero(t, b.count(t, "true"))
	})

	t.Run("SavepointRollbackWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		kept := herald.Message{ID: herald.NewID(), Topic: "kept"}
		require.NoError(t, b.writer.WriteTx(ctx, tx, kept))
		_, err = tx.ExecContext(ctx, `SAVEPOINT sp`)
		require.NoError(t, err)
		require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{Topic: "undone"}))
		_, err = tx.ExecContext(ctx, `ROLLBACK TO sp`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		require.Equal(t, 1, b.count(t, "true"))
		require.Equal(t, 1, b.count(t, "id = ?", kept.ID))
	})

	t.Run("InvalidMessageWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		err = b.writer.WriteTx(ctx, tx, herald.Message{Topic: "ok"}, herald.Message{Topic: ""})
		var ve *herald.ValidationError
		require.True(t, errors.As(err, &ve), "got %v", err)
		require.Equal(t, 1, ve.Index)
		var n int
		require.NoError(t, tx.QueryRow(`SELECT count(*) FROM herald_outbox`).Scan(&n))
		require.Zero(t, n, "the valid message of the call must not be written either")
	})

	t.Run("ManyMessagesKeepTheirOrderAcrossStatements", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Several statements' worth of messages in one call.
		ids := b.writeN(t, "t", 300, 300)
		rows, err := b.db.Query(`SELECT id FROM herald_outbox ORDER BY seq`)
		require.NoError(t, err)
		defer rows.Close()
		var got []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			got = append(got, id)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, ids, got)
	})

	t.Run("PayloadCapIsConfigurable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		w, err := heraldsqlite.NewWriter(&heraldsqlite.Config{MaxPayloadBytes: 8})
		require.NoError(t, err)
		tx, err := b.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		require.ErrorIs(t, w.WriteTx(ctx, tx, herald.Message{Topic: "t", Payload: []byte("123456789")}), herald.ErrInvalidMessage)
		require.NoError(t, w.WriteTx(ctx, tx, herald.Message{Topic: "t", Payload: []byte("12345678")}))
	})

	t.Run("NilTxIsRefused", func(t *testing.T) {
		t.Parallel()
		w, err := heraldsqlite.NewWriter(nil)
		require.NoError(t, err)
		require.ErrorContains(t, w.WriteTx(ctx, nil, herald.Message{Topic: "t"}), "tx is nil")
	})
}

// The documented contract for programs in other languages: topic, key and
// payload, every other column left to its default.
func TestPlainSQLContract(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("MinimalInsertIsClaimable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `INSERT INTO herald_outbox (topic, key, payload) VALUES ('orders', 'order-42', '{"total":4200}')`)
		envs, err := b.driver.Claim(ctx, herald.ClaimParams{Token: herald.NewID(), Owner: "test", Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, envs, 1)
		e := envs[0]
		u, err := uuid.Parse(e.ID)
		require.NoError(t, err, "the default id is a UUID")
		require.Equal(t, u.String(), e.ID, "in canonical lower-case text")
		require.Equal(t, uuid.Version(4), u.Version())
		require.Equal(t, uuid.RFC4122, u.Variant())
		require.Equal(t, "orders", e.Topic)
		require.Equal(t, "order-42", e.Key)
		require.Equal(t, []byte(`{"total":4200}`), e.Payload)
		require.Empty(t, e.Headers)
		require.Equal(t, 1, e.Attempt)
		require.WithinDuration(t, time.Now(), e.CreatedAt, 5*time.Second)
	})

	t.Run("DefaultIDsAreDistinct", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.exec(t, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
			INSERT INTO herald_outbox (topic, payload) SELECT 't', x'00' FROM n`)
		require.Equal(t, 1000, b.count(t, "true"))
		var distinct int
		require.NoError(t, b.db.QueryRow(`SELECT count(DISTINCT id) FROM herald_outbox`).Scan(&distinct))
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
			_, err := b.db.ExecContext(ctx, stmt)
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
				tx, err := bu.db.BeginTx(ctx, nil)
				require.NoError(b, err)
				require.NoError(b, bu.writer.WriteTx(ctx, tx, msgs...))
				require.NoError(b, tx.Commit())
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
