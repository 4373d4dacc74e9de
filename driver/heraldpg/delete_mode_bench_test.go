package heraldpg_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

// BenchmarkWriteTxCDC is the producer's cost of an event on a table
// relayed by change-data-capture (inserts default to streamed): one
// transaction of one event per op, committed. Kept is the pgx writer as
// it is by default, Deleted the same with Config.DeleteAfterInsert (the
// insert and its delete in one batch), Insert a hand-written INSERT of
// topic, key and payload for reference. Each runs on an outbox of its
// own, made once per test binary run (-count repeats each sub-benchmark
// in turn on the same table). Besides the time, each reports the WAL it
// wrote per op, which unlike the time does not depend on the machine's
// load. Compare them with benchstat:
//
//	go test -run XXX -bench WriteTxCDC -benchtime 2000x -count 5 ./driver/heraldpg
func BenchmarkWriteTxCDC(b *testing.B) {
	pool := heraldtest.PostgresPool(b)
	outbox := func(deleting bool) *pgtest.Outbox {
		o := pgtest.New(b, pool, heraldpg.Config{DeleteAfterInsert: deleting})
		require.NoError(b, o.Store.StreamInserts(context.Background(), true))
		return o
	}
	kept, deleted, plain := outbox(false), outbox(true), outbox(false)
	payload := []byte(`{"order_id":"order-42","customer":"c-1234","total":4200,"currency":"EUR","lines":[{"sku":"A-1","qty":2}]}`)

	write := func(b *testing.B, o *pgtest.Outbox, one func(ctx context.Context, tx pgx.Tx, key string) error) {
		ctx := context.Background()
		var start string
		require.NoError(b, o.Pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&start))
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			key := fmt.Sprintf("order-%d", i%100)
			if err := pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error { return one(ctx, tx, key) }); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		// WAL written per op, the whole server's: exact on the test
		// binary's own cluster, an upper bound on a shared server.
		var wal float64
		require.NoError(b, o.Pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::float8`, start).Scan(&wal))
		b.ReportMetric(wal/float64(b.N), "WAL-B/op")
	}
	b.Run("Kept", func(b *testing.B) {
		write(b, kept, func(ctx context.Context, tx pgx.Tx, key string) error {
			return kept.Writer.WriteTx(ctx, tx, herald.Message{Topic: "orders", Key: key, Payload: payload})
		})
	})
	b.Run("Deleted", func(b *testing.B) {
		write(b, deleted, func(ctx context.Context, tx pgx.Tx, key string) error {
			return deleted.Writer.WriteTx(ctx, tx, herald.Message{Topic: "orders", Key: key, Payload: payload})
		})
	})
	insert := `INSERT INTO ` + plain.Store.Table() + ` (topic, key, payload) VALUES ($1, $2, $3)`
	b.Run("Insert", func(b *testing.B) {
		write(b, plain, func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, insert, "orders", key, payload)
			return err
		})
	})
}
