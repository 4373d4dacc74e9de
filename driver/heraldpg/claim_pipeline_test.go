package heraldpg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// writeKeys commits one transaction of perKey events for each of keys
// keys (k0, k1, ...) on topic orders, in key order, and returns their
// ids in the order written.
func writeKeys(t testing.TB, o *pgtest.Outbox, keys, perKey int) []string {
	t.Helper()
	msgs := make([]herald.Message, 0, keys*perKey)
	for n := range perKey {
		for k := range keys {
			msgs = append(msgs, herald.Message{ID: uuid.NewString(), Topic: "orders", Key: fmt.Sprintf("k%d", k),
				Payload: fmt.Appendf(nil, "event %d of k%d", n, k)})
		}
	}
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, msgs...) }))
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return ids
}

// claimOrdered claims up to limit events in order per key with a fresh
// token, which it returns with the batch.
func claimOrdered(ctx context.Context, d *heraldpg.Driver, limit int, paused ...string) ([]herald.Envelope, string, error) {
	token := uuid.NewString()
	batch, err := d.Claim(ctx, herald.ClaimParams{Token: token, Owner: "pipeline-test", Limit: limit,
		Lease: time.Minute, PausedTopics: paused})
	return batch, token, err
}

// An ordered claim on a pgx pool is a walk of the keys and the claim of
// what it found, in one transaction: BEGIN and its settings go with the
// walk, COMMIT with the claim, so that it costs two round trips (four
// when each statement went alone), and one that finds nothing costs two.
// The transaction ends every time: the pool's one connection goes back
// idle and is used again, not closed.
func TestOrderedClaimTakesTwoRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, statements, batches := countingPool(t, 1)
	o := pgtest.New(t, pool, heraldpg.Config{})
	writeKeys(t, o, 4, 3)

	// Statements prepared on first use cost a round trip of their own:
	// one claim of each shape first.
	_, _, err := claimOrdered(ctx, o.Store, 1)
	require.NoError(t, err)
	_, _, err = claimOrdered(ctx, o.Store, 1, "orders")
	require.NoError(t, err)

	measure := func(d *heraldpg.Driver, paused ...string) ([]herald.Envelope, string, [2]int64) {
		conns := pool.Stat().NewConnsCount()
		s0, b0 := statements.Load(), batches.Load()
		batch, token, err := claimOrdered(ctx, d, 3, paused...)
		require.NoError(t, err)
		sent := [2]int64{statements.Load() - s0, batches.Load() - b0}
		require.NoError(t, pool.Ping(ctx))
		require.Equal(t, conns, pool.Stat().NewConnsCount(), "the claim's connection was closed instead of going back to the pool")
		return batch, token, sent
	}

	batch, token, sent := measure(o.Store)
	require.Equal(t, [2]int64{0, 2}, sent, "statements sent alone and batches of a claim that finds events")
	require.Len(t, batch, 3, "the events of a key not claimed yet")
	// The claim leased the key of its three events (the default mode),
	// and committed: another connection sees the lease.
	var held int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM "`+o.Config.Schema+`".herald_outbox_leases
		WHERE token = $1`, token).Scan(&held))
	require.Equal(t, 1, held, "the claim committed")

	// A walk that started past the first key starts over from it when it
	// finds too little, which costs a round trip more; a driver of its
	// own walks from the first key (and, when it finds nothing, stays
	// there). Its first claim also asks whether the table is partitioned.
	fresh, err := heraldpg.New(pool, o.Config)
	require.NoError(t, err)
	_, _, err = claimOrdered(ctx, fresh, 1, "orders")
	require.NoError(t, err)
	_, _, sent = measure(fresh, "orders")
	require.Equal(t, [2]int64{1, 1}, sent, "a claim that finds nothing: the walk with BEGIN, then COMMIT")
}

// A pipelined claim whose last statement fails claims nothing and leaves
// no key locked: its transaction is rolled back, the pool's one connection
// goes back to it and is used again, and the next claim takes every key.
func TestAFailedPipelinedClaimClaimsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, _ := countingPool(t, 1)
	o := pgtest.New(t, pool, heraldpg.Config{})
	ids := writeKeys(t, o, 3, 2)

	fail := `"` + o.Config.Schema + `".refuse_claims`
	_, err := pool.Exec(ctx, `CREATE FUNCTION `+fail+`() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN RAISE EXCEPTION 'claims refused by the test'; END$$`)
	require.NoError(t, err)
	// A claim writes rows (keys of one event) or leases (the others).
	leases := `"` + o.Config.Schema + `".herald_outbox_leases`
	_, err = pool.Exec(ctx, `CREATE TRIGGER refuse_claims BEFORE UPDATE ON `+o.Store.Table()+
		` FOR EACH ROW EXECUTE FUNCTION `+fail+`()`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `CREATE TRIGGER refuse_leases BEFORE INSERT ON `+leases+
		` FOR EACH ROW EXECUTE FUNCTION `+fail+`()`)
	require.NoError(t, err)
	conns := pool.Stat().NewConnsCount()
	_, _, err = claimOrdered(ctx, o.Store, 10)
	require.ErrorContains(t, err, "claims refused by the test")
	require.NoError(t, pool.Ping(ctx))
	require.Equal(t, conns, pool.Stat().NewConnsCount(), "the failed claim's connection was closed, not rolled back for reuse")

	var claimed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+o.Store.Table()+` WHERE state <> 'ready'`).Scan(&claimed))
	require.Zero(t, claimed, "rows the failed claim left claimed")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+leases).Scan(&claimed))
	require.Zero(t, claimed, "leases the failed claim left")

	_, err = pool.Exec(ctx, `DROP TRIGGER refuse_claims ON `+o.Store.Table())
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DROP TRIGGER refuse_leases ON `+leases)
	require.NoError(t, err)
	batch, _, err := claimOrdered(ctx, o.Store, 10)
	require.NoError(t, err)
	got := make([]string, len(batch))
	for i, env := range batch {
		got[i] = env.ID
	}
	require.ElementsMatch(t, ids, got, "every event of every key, none held back by a lock left behind")
}

// BenchmarkOrderedClaim is the relay's claim at a steady rate: each op
// commits 5 events of 5 keys, claims them in order per key, and deletes
// them as an acknowledgement would. Pipelined is the driver on a pgx pool
// as it is, Serial the same driver sending each statement alone. Both run
// in one loop, in turn, on one table, so that drift in the machine's load
// falls on both alike; it reports each one's claim time per op and
// Pipelined/Serial:
//
//	go test -run XXX -bench OrderedClaim -benchtime 2000x -count 5 ./driver/heraldpg
func BenchmarkOrderedClaim(b *testing.B) {
	ctx := context.Background()
	o := pgtest.New(b, testenv.PostgresPool(b), heraldpg.Config{})
	serial, err := heraldpg.New(o.Pool, o.Config)
	require.NoError(b, err)
	serial.SerialClaims()
	modes := []struct {
		name string
		d    *heraldpg.Driver
	}{{"Pipelined", o.Store}, {"Serial", serial}}
	spent := make([]time.Duration, len(modes))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		for n := range modes {
			j := (i + n) % len(modes)
			writeKeys(b, o, 5, 1)
			start := time.Now()
			batch, token, err := claimOrdered(ctx, modes[j].d, 5)
			spent[j] += time.Since(start)
			if err != nil || len(batch) != 5 {
				b.Fatalf("claimed %d events of 5: %v", len(batch), err)
			}
			done := herald.CompleteParams{Token: token, Delete: true}
			for _, env := range batch {
				done.Published = append(done.Published, env.ID)
			}
			if _, err := modes[j].d.Complete(ctx, done); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	for j, m := range modes {
		b.ReportMetric(float64(spent[j].Nanoseconds())/float64(b.N), m.name+"-claim-ns")
	}
	b.ReportMetric(float64(spent[0])/float64(spent[1]), "Pipelined/Serial")
}
