package heraldpg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// BenchmarkWriteTxCDC is the producer's cost of an event on a table
// relayed by change-data-capture (inserts default to streamed): one
// transaction of one event per op, committed. Kept is the pgx writer as
// it is by default, Deleted the same with Config.DeleteAfterInsert (the
// insert and its delete in one batch), Emit with Config.EmitMessages (a
// logical decoding message, no row), Insert a hand-written INSERT of
// topic, key and payload for reference. Each runs on an outbox of its
// own, made once per test binary run (-count repeats each sub-benchmark
// in turn on the same table). Besides the time, each reports the WAL it
// wrote per op, which unlike the time does not depend on the machine's
// load. Alternating runs Kept, Deleted and Emit in turn in one loop and
// reports their times' ratios, which hold on a busy machine. Compare
// them with benchstat:
//
//	go test -run XXX -bench WriteTxCDC -benchtime 2000x -count 5 ./driver/heraldpg
func BenchmarkWriteTxCDC(b *testing.B) {
	pool := testenv.PostgresPool(b)
	outbox := func(cfg heraldpg.Config) *pgtest.Outbox {
		o := pgtest.New(b, pool, cfg)
		require.NoError(b, o.Store.StreamInserts(context.Background(), true))
		return o
	}
	kept, deleted, plain := outbox(heraldpg.Config{}), outbox(heraldpg.Config{DeleteAfterInsert: true}), outbox(heraldpg.Config{})
	emitting := outbox(heraldpg.Config{EmitMessages: true})
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
	b.Run("Emit", func(b *testing.B) {
		write(b, emitting, func(ctx context.Context, tx pgx.Tx, key string) error {
			return emitting.Writer.WriteTx(ctx, tx, herald.Message{Topic: "orders", Key: key, Payload: payload})
		})
	})
	// Kept, Deleted and Emit in turn, one transaction each per op, each
	// op starting with the next of them: drift in the machine's load
	// falls on all three alike, which separate sub-benchmarks, run one
	// after the other, cannot promise. It reports each one's mean time
	// per transaction and the ratios to Kept. Alternating writes one
	// event per transaction, where the round trips and the commit's
	// flush dominate; Alternating100 a hundred in one WriteTx, where the
	// database's work per event does.
	alternate := func(perTx int) func(b *testing.B) {
		return func(b *testing.B) {
			ctx := context.Background()
			modes := []struct {
				name string
				o    *pgtest.Outbox
			}{{"Kept", kept}, {"Deleted", deleted}, {"Emit", emitting}}
			spent := make([]time.Duration, len(modes))
			msgs := make([]herald.Message, perTx)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				for m := range msgs {
					msgs[m] = herald.Message{Topic: "orders", Key: fmt.Sprintf("order-%d", (i*perTx+m)%100), Payload: payload}
				}
				for n := range modes {
					j := (i + n) % len(modes)
					o := modes[j].o
					start := time.Now()
					err := pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error {
						return o.Writer.WriteTx(ctx, tx, msgs...)
					})
					spent[j] += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			for j, m := range modes {
				b.ReportMetric(float64(spent[j].Nanoseconds())/float64(b.N), m.name+"-ns/tx")
			}
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "Deleted/Kept")
			b.ReportMetric(float64(spent[2])/float64(spent[0]), "Emit/Kept")
		}
	}
	b.Run("Alternating", alternate(1))
	b.Run("Alternating100", alternate(100))
	insert := `INSERT INTO ` + plain.Store.Table() + ` (topic, key, payload) VALUES ($1, $2, $3)`
	b.Run("Insert", func(b *testing.B) {
		write(b, plain, func(ctx context.Context, tx pgx.Tx, key string) error {
			_, err := tx.Exec(ctx, insert, "orders", key, payload)
			return err
		})
	})
}
