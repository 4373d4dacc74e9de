package heraldcdc_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/internal/testenv"
)

// source opens a Source without heartbeats (only Done moves the slot),
// sending the confirmed position every 100ms; opts change its Config.
func (f fixture) source(t *testing.T, create bool, opts ...func(*heraldcdc.Config)) *heraldcdc.Source {
	t.Helper()
	cfg := heraldcdc.Config{ConnString: f.dsn, CreateSlot: create,
		StatusInterval: 100 * time.Millisecond, HeartbeatInterval: -1, Logger: slog.New(slog.DiscardHandler)}
	for _, o := range opts {
		o(&cfg)
	}
	src, err := heraldcdc.NewSource(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// batch reads the source's next batch, checking it holds at most limit
// events and unreadable rows.
func batch(t *testing.T, src *heraldcdc.Source, limit int) herald.SourceBatch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := src.Next(ctx, limit)
	require.NoError(t, err)
	require.NotNil(t, b.Done)
	require.NotEmpty(t, len(b.Events)+len(b.Unreadable))
	require.LessOrEqual(t, len(b.Events)+len(b.Unreadable), limit)
	return b
}

// requireRefused checks that env, read from a row that could not all be
// read, is one the relay refuses, saying why (reason).
func requireRefused(t *testing.T, env herald.Envelope, reason string) {
	t.Helper()
	_, err := herald.Prepare([]herald.Message{env.Message}, 0)
	require.ErrorIs(t, err, herald.ErrInvalidMessage)
	require.ErrorContains(t, err, "unreadable row: column "+reason)
}

func eventIDs(b herald.SourceBatch) []string {
	var out []string
	for _, e := range b.Events {
		out = append(out, e.ID)
	}
	return out
}

// insertMany commits one transaction of n rows of key and returns their
// ids in insert order.
func (f fixture) insertMany(t *testing.T, n int, key string) []string {
	t.Helper()
	rows, err := f.pool.Query(context.Background(), `INSERT INTO herald_outbox (topic, key, payload)
		SELECT 'orders', $2, convert_to(g::text, 'UTF8') FROM generate_series(1, $1::int) g RETURNING id::text`, n, key)
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// walInsert is the server's WAL insert position: past every commit made
// so far (the test cluster commits asynchronously, so not the written
// position), and before any commit to come.
func (f fixture) walInsert(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s))
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return lsn
}

// awaitSlotIdle waits until no walsender holds the slot: a closed or
// terminated stream's ends a moment later.
func (f fixture) awaitSlotIdle(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		var active bool
		require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = 'herald_outbox'`).Scan(&active))
		return !active
	}, 20*time.Second, 20*time.Millisecond)
}

// staysAtOrBefore checks that the slot's confirmed position stays at or
// before lsn for several status intervals.
func (f fixture) staysAtOrBefore(t *testing.T, lsn pglogrepl.LSN, msg string) {
	t.Helper()
	require.Never(t, func() bool { return f.slotConfirmed(t) > lsn }, 600*time.Millisecond, 20*time.Millisecond, msg)
}

func TestSourceBatchesKeepTheLimitAndConfirmOnlyWhatIsDone(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	src := f.source(t, true)
	start := f.slotConfirmed(t)

	first := f.insertMany(t, 3, "a")
	afterFirst := f.walInsert(t)
	big := f.insertMany(t, 2500, "b")
	afterBig := f.walInsert(t)
	last := f.insertMany(t, 2, "c")
	afterLast := f.walInsert(t)
	want := append(append(append([]string{}, first...), big...), last...)

	var (
		got     []string
		batches []herald.SourceBatch
	)
	for len(got) < len(want) {
		b := batch(t, src, 1000)
		batches = append(batches, b)
		got = append(got, eventIDs(b)...)
	}
	require.Equal(t, want, got, "every event once, in commit order")
	require.GreaterOrEqual(t, len(batches), 3, "the 2,500 rows of one transaction came in batches of at most 1,000")
	prev := int64(0)
	for _, b := range batches {
		require.Empty(t, b.Unreadable)
		for _, e := range b.Events {
			require.Equal(t, 1, e.Attempt)
			require.False(t, e.Ordered, "the relay decides")
			require.Greater(t, e.Seq, prev)
			require.WithinDuration(t, time.Now(), e.CreatedAt, time.Minute)
			require.Equal(t, 1, e.EventVersion)
			prev = e.Seq
		}
	}

	t.Run("AMiddleBatchNotDoneHoldsItsTransaction", func(t *testing.T) {
		// The batch carrying the big transaction's 1,500th event holds
		// only its events: every batch around it is done, the last first.
		middle := -1
		n := 0
		for i, b := range batches {
			if n < len(first)+1500 && n+len(b.Events) >= len(first)+1500 {
				middle = i
			}
			n += len(b.Events)
		}
		require.Positive(t, middle)
		for i := len(batches) - 1; i >= 0; i-- {
			if i != middle {
				batches[i].Done()
			}
		}
		require.Eventually(t, func() bool { return f.slotConfirmed(t) > start }, 20*time.Second, 20*time.Millisecond,
			"the first transaction is confirmed")
		f.staysAtOrBefore(t, afterFirst, "no position past the big transaction's start while one of its batches is not done")
		require.LessOrEqual(t, src.Confirmed(), afterFirst)

		batches[middle].Done()
		require.Eventually(t, func() bool { return f.slotConfirmed(t) > afterBig }, 20*time.Second, 20*time.Millisecond,
			"the last transaction is confirmed once the middle batch is done")
		require.LessOrEqual(t, f.slotConfirmed(t), afterLast)
		_, pending := src.OldestUnconfirmed()
		require.False(t, pending)
	})

	t.Run("ABatchDoneTwiceCountsOnce", func(t *testing.T) {
		before := f.slotConfirmed(t)
		ids := f.insertMany(t, 20, "d")
		one := batch(t, src, 10)
		two := batch(t, src, 10)
		require.Equal(t, ids, append(eventIDs(one), eventIDs(two)...))
		one.Done()
		one.Done()
		f.staysAtOrBefore(t, before, "the second Done of the first half does not stand for the second half")
		two.Done()
		require.Eventually(t, func() bool { return f.slotConfirmed(t) > before }, 20*time.Second, 20*time.Millisecond)
	})
}

func TestSourceHandsOutOnlyStreamedRows(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	src := f.source(t, true)

	t.Run("ReadyRowsAreLeftToThePollingPath", func(t *testing.T) {
		tx, err := f.pool.Begin(context.Background())
		require.NoError(t, err)
		streamed := insertIn(t, tx, [3]string{"orders", "a", "1"})
		_, err = tx.Exec(context.Background(), `INSERT INTO herald_outbox (topic, key, payload, state) VALUES ('orders', 'a', 'r', 'ready')`)
		require.NoError(t, err)
		streamed = append(streamed, insertIn(t, tx, [3]string{"orders", "a", "2"})...)
		require.NoError(t, tx.Commit(context.Background()))
		// A transaction of polled rows only, then a streamed one.
		_, err = f.pool.Exec(context.Background(), `INSERT INTO herald_outbox (topic, payload, state) VALUES ('orders', 'r', 'ready'), ('orders', 'd', 'dead')`)
		require.NoError(t, err)
		afterPolled := f.walInsert(t)
		later := f.insert(t, [3]string{"orders", "b", "3"})

		var got []string
		var batches []herald.SourceBatch
		for len(got) < 3 {
			b := batch(t, src, 10)
			got = append(got, eventIDs(b)...)
			batches = append(batches, b)
		}
		require.Equal(t, append(streamed, later...), got)
		for _, b := range batches {
			b.Done()
		}
		require.Eventually(t, func() bool { return f.slotConfirmed(t) > afterPolled }, 20*time.Second, 20*time.Millisecond)
		require.Greater(t, src.Confirmed(), afterPolled)
	})

	t.Run("TransactionsOfPolledRowsOnlyMoveTheSlot", func(t *testing.T) {
		before := f.slotConfirmed(t)
		_, err := f.pool.Exec(context.Background(), `INSERT INTO herald_outbox (topic, payload, state) VALUES ('orders', 'r', 'ready')`)
		require.NoError(t, err)
		// Next waits for an event; meanwhile the polled transaction is
		// confirmed, every earlier batch being done.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err = src.Next(ctx, 10)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Eventually(t, func() bool { return f.slotConfirmed(t) > before }, 20*time.Second, 20*time.Millisecond)
	})

	t.Run("UnreadableRowsComeAsRefusedEvents", func(t *testing.T) {
		tx, err := f.pool.Begin(context.Background())
		require.NoError(t, err)
		good := insertIn(t, tx, [3]string{"orders", "a", "good"})
		var bad string
		require.NoError(t, tx.QueryRow(context.Background(),
			`INSERT INTO herald_outbox (topic, payload, headers) VALUES ('orders', 'x', '{"n": 1}') RETURNING id::text`).Scan(&bad))
		// An unreadable row for polling is the polling path's to judge.
		_, err = tx.Exec(context.Background(), `INSERT INTO herald_outbox (topic, payload, headers, state) VALUES ('orders', 'x', '{"n": 1}', 'ready')`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(context.Background()))

		b := batch(t, src, 10)
		require.Equal(t, append(good, bad), eventIDs(b), "in commit order")
		require.Empty(t, b.Unreadable)
		requireRefused(t, b.Events[1], "headers")
		before := f.slotConfirmed(t)
		b.Done()
		require.Eventually(t, func() bool { return f.slotConfirmed(t) > before }, 20*time.Second, 20*time.Millisecond)
	})
}

func TestSourceRedeliversWhatWasNotDoneAfterARestart(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	src := f.source(t, true)
	first := f.insertMany(t, 2, "a")
	second := f.insertMany(t, 2, "b")
	third := f.insertMany(t, 1, "c")

	// A limit of two: the first two transactions fill a batch each.
	b1, b2 := batch(t, src, 2), batch(t, src, 2)
	require.Equal(t, first, eventIDs(b1))
	require.Equal(t, second, eventIDs(b2))
	b3 := batch(t, src, 2)
	require.Equal(t, third, eventIDs(b3))
	b1.Done()
	b3.Done() // done, but behind the second, which is not
	require.NoError(t, src.Close())
	require.NoError(t, src.Close(), "a second Close does nothing")
	_, err := src.Next(context.Background(), 10)
	require.Error(t, err, "a closed source")

	f.awaitSlotIdle(t)
	src = f.source(t, false)
	var got []string
	for len(got) < len(second)+len(third) {
		b := batch(t, src, 10)
		got = append(got, eventIDs(b)...)
		b.Done()
	}
	require.Equal(t, append(second, third...), got, "the first, done, is not delivered again; what followed the undone batch is")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = src.Next(ctx, 10)
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing more")
}

func TestSourceSurvivesTheLossOfItsConnection(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	src := f.source(t, true)

	// read collects events until it has every one of want, doing each
	// batch; events delivered again (read before the loss, confirmed
	// after) are allowed, and checked to be ones read before.
	read := func(t *testing.T, seen map[string]bool, want []string) {
		t.Helper()
		var fresh []string
		for len(fresh) < len(want) {
			b := batch(t, src, 100)
			for _, id := range eventIDs(b) {
				if !seen[id] {
					seen[id] = true
					fresh = append(fresh, id)
				}
			}
			b.Done()
		}
		require.Equal(t, want, fresh, "nothing lost, in commit order")
	}
	seen := map[string]bool{}
	read(t, seen, f.insertMany(t, 5, "a"))

	t.Run("ItsWalsenderTerminated", func(t *testing.T) {
		var terminated bool
		require.NoError(t, f.pool.QueryRow(context.Background(),
			`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'herald_outbox'`).Scan(&terminated))
		require.True(t, terminated)
		want := f.insertMany(t, 300, "b")
		want = append(want, f.insertMany(t, 3, "c")...)
		read(t, seen, want)
		// And again in the middle of a transaction's batches: the rest of
		// it, read already, is handed out; then, from the new stream, the
		// whole of it again, since it was not confirmed.
		want = f.insertMany(t, 250, "d")
		b := batch(t, src, 100)
		require.Equal(t, want[:100], eventIDs(b))
		b.Done()
		require.NoError(t, f.pool.QueryRow(context.Background(),
			`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'herald_outbox'`).Scan(&terminated))
		require.True(t, terminated)
		var got []string
		for len(got) < 150+250 {
			b := batch(t, src, 100)
			got = append(got, eventIDs(b)...)
			b.Done()
		}
		require.Equal(t, append(append([]string{}, want[100:]...), want...), got)
		for _, id := range want {
			seen[id] = true
		}
	})

	t.Run("PostgreSQLRestarted", func(t *testing.T) {
		f.pc.Stop(t)
		f.pc.Start(t)
		f.pool.Reset() // its connections went with the server
		want := f.insertMany(t, 3, "e")
		read(t, seen, want)
	})

	t.Run("ADroppedSlotIsReported", func(t *testing.T) {
		// The source reconnects only within Next: between calls, the slot
		// can be dropped once its walsender ends.
		require.Eventually(t, func() bool {
			_, err := f.pool.Exec(context.Background(),
				`SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'herald_outbox' AND active`)
			require.NoError(t, err)
			_, err = f.pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('herald_outbox')`)
			return err == nil
		}, 20*time.Second, 50*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		// What the stream read before it ended may come first, again.
		var err error
		for err == nil {
			var b herald.SourceBatch
			if b, err = src.Next(ctx, 10); err == nil {
				for _, id := range eventIDs(b) {
					require.True(t, seen[id], "only events read before")
				}
				b.Done()
			}
		}
		require.ErrorContains(t, err, "replication slot herald_outbox does not exist")
		require.NoError(t, ctx.Err(), "reported at once, not retried until ctx ends")
		_, err = src.Next(ctx, 10)
		require.ErrorContains(t, err, "does not exist", "and again at the next call")
	})
}

// Transactions read in parts of 7 rows go out in batches of 10 as whole
// transactions, unless one alone is larger than 10: it then starts a batch
// of its own and is split. A transaction whose end comes after every one
// of its events was acknowledged is confirmed when the end is read.
func TestSourceKeepsTransactionsWholeAcrossParts(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	src := f.source(t, true, func(c *heraldcdc.Config) { c.PartRows = 7 })
	sizes := []int{3, 4, 25, 2, 6, 10, 1, 13, 7, 9, 11, 14}
	txOf := map[string]int{}
	var want []string
	for i, n := range sizes {
		for _, id := range f.insertMany(t, n, fmt.Sprint("k", i)) {
			txOf[id] = i
			want = append(want, id)
		}
	}
	end := f.walInsert(t)

	var got []string
	batchOf := map[string]int{}
	prev := -1 // the transaction of the previous event
	for nb := 0; len(got) < len(want); nb++ {
		b := batch(t, src, 10)
		ids := eventIDs(b)
		for j, id := range ids {
			batchOf[id] = nb
			if tx := txOf[id]; tx != prev && sizes[tx] > 10 && j > 0 {
				require.Failf(t, "a transaction larger than a batch starts within one", "batch %d, event %d", nb, j)
			}
			prev = txOf[id]
		}
		got = append(got, ids...)
		b.Done()
	}
	require.Equal(t, want, got, "every event once, in commit order")
	first := map[int]string{}
	for _, id := range want {
		tx := txOf[id]
		if _, ok := first[tx]; !ok {
			first[tx] = id
		}
		if sizes[tx] <= 10 {
			require.Equal(t, batchOf[first[tx]], batchOf[id], "transaction %d of %d rows split across batches", tx, sizes[tx])
		}
	}
	// The last commit is the last WAL written: its end is the insert position.
	require.Eventually(t, func() bool { return f.slotConfirmed(t) >= end }, 20*time.Second, 20*time.Millisecond)

	t.Run("AnEndReadAfterEveryAck", func(t *testing.T) {
		// Seven rows fill a part; the commit comes in an empty last part,
		// which the Source reads only at the next call, after Done.
		ids := f.insertMany(t, 7, "x")
		after := f.walInsert(t)
		b := batch(t, src, 7)
		require.Equal(t, ids, eventIDs(b))
		b.Done()
		f.staysAtOrBefore(t, end, "its end is not read yet")
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		_, err := src.Next(ctx, 7)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Eventually(t, func() bool { return f.slotConfirmed(t) >= after }, 20*time.Second, 20*time.Millisecond,
			"confirmed once its end is read")
	})
}
