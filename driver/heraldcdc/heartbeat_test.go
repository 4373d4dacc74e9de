package heraldcdc_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/internal/testenv"
)

// openBeating opens a stream (creating the slot) whose heartbeats come
// every interval.
func (f fixture) openBeating(t *testing.T, interval time.Duration) *heraldcdc.Stream {
	t.Helper()
	s, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, CreateSlot: true, StatusInterval: time.Second,
		HeartbeatInterval: interval, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// currentLSN is the server's current WAL position.
func (f fixture) currentLSN(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&s))
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return lsn
}

// busy commits transactions on a table outside the publication: WAL the
// slot holds back until its confirmed position passes it.
func (f fixture) busy(t *testing.T, txs int) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), `CREATE TABLE IF NOT EXISTS busy (n int, pad text)`)
	require.NoError(t, err)
	for i := range txs {
		_, err := f.pool.Exec(context.Background(), `INSERT INTO busy SELECT g, repeat('x', 100) FROM generate_series(1, 50) g`)
		require.NoError(t, err, "transaction %d", i)
	}
}

// beatNow writes a heartbeat of the stream's slot from the test, so that
// the test knows one lies at a known place in the WAL.
func (f fixture) beatNow(t *testing.T) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), `SELECT pg_logical_emit_message(false, 'herald.heartbeat', 'herald_outbox')`)
	require.NoError(t, err)
}

// With the outbox idle and another table busy, heartbeats carry the
// slot's confirmed position past the other table's WAL once the caller
// confirmed what it got, and not before.
func TestHeartbeatsMoveAnIdleSlotPastOtherTablesWAL(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	s := f.openBeating(t, 50*time.Millisecond)

	f.insert(t, [3]string{"orders", "a", "1"})
	tx := next(t, s)
	f.busy(t, 20)
	// A heartbeat read after the transaction, then a marker transaction:
	// once the marker comes, the heartbeat was read, and dropped.
	f.beatNow(t)
	f.insert(t, [3]string{"orders", "a", "marker"})
	marker := next(t, s)
	require.Less(t, s.Confirmed(), tx.End, "a heartbeat never passes a transaction handed out and not confirmed")
	require.Less(t, f.slotConfirmed(t), tx.End)

	s.Confirm(tx.End)
	s.Confirm(marker.End)
	// From here on the outbox is idle.
	f.busy(t, 40)
	after := f.currentLSN(t)
	require.Eventually(t, func() bool { return f.slotConfirmed(t) > after }, 20*time.Second, 20*time.Millisecond,
		"the slot's confirmed position passes the busy table's WAL")
	require.Positive(t, s.Heartbeats())
	_, pending := s.OldestUnconfirmed()
	require.False(t, pending)
}

// Heartbeats never confirm past a transaction handed out and not
// confirmed, nor past a later one while an earlier is unconfirmed, and the
// position they reach holds across a restart of the stream.
func TestHeartbeatsNeverPassAnUnconfirmedTransaction(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	s := f.openBeating(t, 20*time.Millisecond)
	start := s.Start()

	tr := heraldcdc.NewTracker(start)
	f.insert(t, [3]string{"orders", "a", "1"}, [3]string{"orders", "a", "2"})
	first := next(t, s)
	firstTxn, err := tr.Add(first.End, len(first.Events))
	require.NoError(t, err)
	oldest, pending := s.OldestUnconfirmed()
	require.True(t, pending)
	require.Equal(t, first.CommitTime, oldest)

	for range 3 {
		f.busy(t, 5)
		f.beatNow(t)
	}
	f.insert(t, [3]string{"orders", "b", "second"})
	second := next(t, s)
	secondTxn, err := tr.Add(second.End, len(second.Events))
	require.NoError(t, err)

	// The second acknowledged, the first half: nothing may be confirmed.
	require.NoError(t, tr.Ack(secondTxn, 1))
	require.NoError(t, tr.Ack(firstTxn, 1))
	s.Confirm(tr.Confirmed())
	f.beatNow(t)
	f.insert(t, [3]string{"orders", "c", "marker"})
	marker := next(t, s)
	require.Less(t, s.Confirmed(), first.End)
	require.Less(t, f.slotConfirmed(t), first.End)

	// The first whole: the prefix reaches the second, and heartbeats stay
	// behind the marker, handed out and unconfirmed.
	require.NoError(t, tr.Ack(firstTxn, 1))
	s.Confirm(tr.Confirmed())
	require.Eventually(t, func() bool { return f.slotConfirmed(t) == second.End }, 20*time.Second, 20*time.Millisecond)
	f.busy(t, 5)
	f.beatNow(t)
	f.insert(t, [3]string{"orders", "d", "marker"})
	last := next(t, s)
	require.Less(t, s.Confirmed(), marker.End)
	oldest, pending = s.OldestUnconfirmed()
	require.True(t, pending)
	require.Equal(t, marker.CommitTime, oldest)

	// A restarted stream redelivers the marker.
	require.NoError(t, s.Close())
	require.Eventually(t, func() bool {
		var active bool
		require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = 'herald_outbox'`).Scan(&active))
		return !active
	}, 20*time.Second, 20*time.Millisecond)
	s = f.openBeating(t, 20*time.Millisecond)
	require.Less(t, s.Start(), marker.End)
	require.Equal(t, ids(marker), ids(next(t, s)))
	require.Equal(t, ids(last), ids(next(t, s)))
}

// SlotStatus shows the WAL a slot retains growing while nothing is
// confirmed, and dropping once the stream confirms.
func TestSlotStatusFollowsTheConfirmedPosition(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setupPolled(t)
	_, err := heraldcdc.SlotStatus(context.Background(), f.pool, "herald_outbox")
	require.ErrorIs(t, err, heraldcdc.ErrNoSlot)
	s := f.openBeating(t, -1) // no heartbeats: only Confirm moves the slot
	require.NoError(t, f.driver(t).StreamInserts(context.Background(), true))
	f.insert(t, [3]string{"orders", "a", "1"})
	tx := next(t, s)
	before, err := heraldcdc.SlotStatus(context.Background(), f.pool, "herald_outbox")
	require.NoError(t, err)
	require.True(t, before.Active)
	require.Equal(t, "reserved", before.WALStatus)
	require.Equal(t, int64(-1), before.SafeWALBytes, "max_slot_wal_keep_size is unlimited by default")
	f.busy(t, 40)
	grown, err := heraldcdc.SlotStatus(context.Background(), f.pool, "herald_outbox")
	require.NoError(t, err)
	require.Greater(t, grown.RetainedBytes, before.RetainedBytes+100_000)
	require.Greater(t, grown.LagBytes, before.LagBytes+100_000)

	s.Confirm(tx.End)
	f.insert(t, [3]string{"orders", "a", "2"})
	tx = next(t, s)
	s.Confirm(tx.End)
	// The slot's restart_lsn moves to a point PostgreSQL logs at
	// checkpoints once a confirmation passes it: checkpoint, and confirm
	// one more transaction, until it has.
	require.Eventually(t, func() bool {
		_, err := f.pool.Exec(context.Background(), `CHECKPOINT`)
		require.NoError(t, err)
		f.insert(t, [3]string{"orders", "a", "more"})
		s.Confirm(next(t, s).End)
		after, err := heraldcdc.SlotStatus(context.Background(), f.pool, "herald_outbox")
		require.NoError(t, err)
		return after.LagBytes < grown.LagBytes/2 && after.RetainedBytes < grown.RetainedBytes/2
	}, 20*time.Second, 50*time.Millisecond)
}
