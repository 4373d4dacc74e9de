package heraldpg_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// Config.DeleteAfterInsert, the zero-bloat mode of a table relayed by
// change-data-capture: each writer inserts and deletes its rows in the
// caller's transaction. That the relay still sees and publishes every
// event is heraldcdc's TestZeroBloatWritesArePublishedFromTheLog.

// deleting is an outbox whose writers delete what they insert, on a pgx
// pool and on database/sql over the same pool.
type deleting struct {
	*bundle
	db *sql.DB
}

// setupDeleting migrates an outbox for cfg with DeleteAfterInsert set;
// streamed makes its inserts default to the streamed state, as
// `herald relay --source cdc` does.
func setupDeleting(t *testing.T, cfg heraldpg.Config, streamed bool) deleting {
	t.Helper()
	cfg.DeleteAfterInsert = true
	return setupWriting(t, cfg, streamed)
}

// setupWriting migrates an outbox for cfg, its writers in the write mode
// cfg says, with its inserts defaulting to the streamed state if
// streamed.
func setupWriting(t *testing.T, cfg heraldpg.Config, streamed bool) deleting {
	t.Helper()
	o := pgtest.New(t, testenv.PostgresPool(t), cfg)
	if streamed {
		require.NoError(t, o.Store.StreamInserts(context.Background(), true))
	}
	db := stdlib.OpenDBFromPool(o.Pool)
	t.Cleanup(func() { _ = db.Close() })
	return deleting{bundle: &bundle{Outbox: o, Kit: heralddrivertest.NewKit(t, o.Driver)}, db: db}
}

// pgxRoundTrips runs, for each n, one transaction in which d's pgx
// writer writes n messages, on a pool that counts what pgx sends, and
// returns the statements it sent outside a batch and the batches, per n.
func pgxRoundTrips(t *testing.T, d deleting, ns ...int) [][2]int64 {
	t.Helper()
	ctx := context.Background()
	pool, statements, batches := countingPool(t, 0)
	var sent [][2]int64
	for _, n := range ns {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		s0, b0 := statements.Load(), batches.Load()
		require.NoError(t, d.Writer.WriteTx(ctx, tx, messages(n)...))
		sent = append(sent, [2]int64{statements.Load() - s0, batches.Load() - b0})
		require.NoError(t, tx.Commit(ctx))
	}
	return sent
}

// writeTx is one open transaction of some writer.
type writeTx struct {
	write func(...herald.Message) error
	// counts is what the connection's backend inserted into and deleted
	// from the outbox table and has not reported yet
	// (pg_stat_xact_user_tables): its difference over a write is what the
	// write did in the transaction.
	counts   func() (inserted, deleted int64)
	commit   func() error
	rollback func() error
}

// written writes msgs and returns how many rows that inserted and deleted.
func (x writeTx) written(t *testing.T, msgs ...herald.Message) [2]int64 {
	t.Helper()
	ins0, del0 := x.counts()
	require.NoError(t, x.write(msgs...))
	ins, del := x.counts()
	return [2]int64{ins - ins0, del - del0}
}

// writerKind begins a transaction and joins a writer of one kind to it.
type writerKind struct {
	name  string
	begin func(t *testing.T) writeTx
}

const xactCountsSQL = `SELECT n_tup_ins, n_tup_del FROM pg_stat_xact_user_tables WHERE relid = $1::regclass`

// writerKinds are NewWriter's, NewSQLWriter's and NewExecWriter's writers
// on d's config.
func (d deleting) writerKinds(t *testing.T) []writerKind {
	t.Helper()
	ctx := context.Background()
	sw, err := heraldpg.NewSQLWriter(d.Config)
	require.NoError(t, err)
	ew, err := heraldpg.NewExecWriter(d.Config)
	require.NoError(t, err)
	table := d.Store.Table()
	sqlBegin := func(t *testing.T, write func(*sql.Tx, ...herald.Message) error) writeTx {
		tx, err := d.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback() }) // a no-op after Commit; else the schema's drop waits for it
		return writeTx{
			write: func(msgs ...herald.Message) error { return write(tx, msgs...) },
			counts: func() (ins, del int64) {
				require.NoError(t, tx.QueryRowContext(ctx, xactCountsSQL, table).Scan(&ins, &del))
				return ins, del
			},
			commit: tx.Commit, rollback: tx.Rollback,
		}
	}
	return []writerKind{
		{"pgx", func(t *testing.T) writeTx {
			tx, err := d.Pool.Begin(ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(ctx) })
			return writeTx{
				write: func(msgs ...herald.Message) error { return d.Writer.WriteTx(ctx, tx, msgs...) },
				counts: func() (ins, del int64) {
					require.NoError(t, tx.QueryRow(ctx, xactCountsSQL, table).Scan(&ins, &del))
					return ins, del
				},
				commit: func() error { return tx.Commit(ctx) }, rollback: func() error { return tx.Rollback(ctx) },
			}
		}},
		{"database/sql", func(t *testing.T) writeTx {
			return sqlBegin(t, func(tx *sql.Tx, msgs ...herald.Message) error { return sw.WriteTx(ctx, tx, msgs...) })
		}},
		{"exec", func(t *testing.T) writeTx {
			return sqlBegin(t, func(tx *sql.Tx, msgs ...herald.Message) error { return ew.WriteTx(ctx, tx, msgs...) })
		}},
	}
}

func messages(n int) []herald.Message {
	msgs := make([]herald.Message, n)
	for i := range msgs {
		msgs[i] = herald.Message{Topic: "orders", Key: fmt.Sprintf("k%d", i%3), Payload: []byte(fmt.Sprintf("event %d", i))}
	}
	return msgs
}

func TestDeleteAfterInsert(t *testing.T) {
	t.Parallel()

	t.Run("CommittedWritesLeaveNoRow", func(t *testing.T) {
		t.Parallel()
		d := setupDeleting(t, heraldpg.Config{}, true)
		for _, k := range d.writerKinds(t) {
			for _, n := range []int{1, 50} {
				t.Run(fmt.Sprintf("%s/%d", k.name, n), func(t *testing.T) {
					tx := k.begin(t)
					require.Equal(t, [2]int64{int64(n), int64(n)}, tx.written(t, messages(n)...),
						"inserted, then deleted, in the transaction")
					require.NoError(t, tx.commit())
					require.Empty(t, d.Counts())
				})
			}
		}
	})

	t.Run("RolledBackWritesLeaveNothing", func(t *testing.T) {
		t.Parallel()
		d := setupDeleting(t, heraldpg.Config{}, true)
		for _, k := range d.writerKinds(t) {
			for _, n := range []int{1, 50} {
				t.Run(fmt.Sprintf("%s/%d", k.name, n), func(t *testing.T) {
					tx := k.begin(t)
					require.NoError(t, tx.write(messages(n)...))
					require.NoError(t, tx.rollback())
					require.Empty(t, d.Counts())
				})
			}
		}
	})

	// On a partitioned table the delete finds the row in the partition
	// its created_at chose.
	t.Run("CommittedWritesLeaveNoRowInAPartitionedTable", func(t *testing.T) {
		t.Parallel()
		d := setupDeleting(t, heraldpg.Config{Partition: &heraldpg.Partitioning{}}, true)
		for _, k := range d.writerKinds(t) {
			t.Run(k.name, func(t *testing.T) {
				tx := k.begin(t)
				require.NoError(t, tx.write(messages(1)...))
				require.NoError(t, tx.write(messages(20)...))
				require.NoError(t, tx.commit())
				require.Empty(t, d.Counts())
			})
		}
	})

	// While the table's inserts default to ready (polling relays, or a
	// switch to or from change-data-capture under way), a row deleted
	// would be an event lost: the writers keep it for the claims.
	t.Run("ReadyInsertsStayForTheClaims", func(t *testing.T) {
		t.Parallel()
		d := setupDeleting(t, heraldpg.Config{}, false)
		for _, k := range d.writerKinds(t) {
			tx := k.begin(t)
			require.Equal(t, [2]int64{1, 0}, tx.written(t, messages(1)...), k.name)
			require.Equal(t, [2]int64{4, 0}, tx.written(t, messages(4)...), k.name)
			require.NoError(t, tx.commit(), k.name)
		}
		require.Equal(t, map[string]int64{"orders/ready": 15}, d.Counts())
	})

	t.Run("PgxSendsTheInsertAndTheDeleteAsOneBatch", func(t *testing.T) {
		t.Parallel()
		d := setupDeleting(t, heraldpg.Config{}, true)
		require.Equal(t, [][2]int64{{0, 1}, {0, 1}}, pgxRoundTrips(t, d, 1, 100),
			"1 and 100 messages: statements outside a batch, batches")
		require.Empty(t, d.Counts())
	})
}

// batchCountingTracer counts pgx's batches besides its statements.
// countingPool opens a pool on the test database whose tracer counts
// the statements pgx sends alone and the batches it sends (a round trip
// each, once their statements are prepared), of at most maxConns
// connections (0: pgx's default). It closes with the test.
func countingPool(t testing.TB, maxConns int32) (pool *pgxpool.Pool, statements, batches *atomic.Int64) {
	t.Helper()
	statements, batches = new(atomic.Int64), new(atomic.Int64)
	cfg, err := pgxpool.ParseConfig(testenv.PostgresDSN(t))
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = batchCountingTracer{countingTracer{statements}, batches}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err = pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, statements, batches
}

type batchCountingTracer struct {
	countingTracer
	batches *atomic.Int64
}

func (c batchCountingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.batches.Add(1)
	return ctx
}

func (batchCountingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (batchCountingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
