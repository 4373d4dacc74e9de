package heraldcdc_test

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/internal/testenv"
)

// heapInUse is the live Go heap, after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A transaction of 100,000 rows of 1,000-byte payloads (about 125 MiB once
// decoded) read by a Source whose consumer is blocked holding its first
// batch: the stream stops reading at its byte bound, PostgreSQL waits to
// send the rest, and the heap stays within a few buffers. Unblocked, every
// event comes once and in order, in batches of whole transactions or of
// the big one alone (as many rows as fit in BufferBytes), and the slot passes the big transaction only once
// its first and its last batch are both done.
//
// Not parallel: the heap is measured, and other tests' would count.
func TestSourceMemoryIsBoundedInBytesWhateverTheTransaction(t *testing.T) {
	testenv.Long(t)
	const (
		rows        = 100_000
		payloadLen  = 1000
		bufferBytes = 1 << 20
		limit       = 1000
	)
	f := setup(t)
	ctx := context.Background()
	src, err := heraldcdc.NewSource(ctx, heraldcdc.Config{ConnString: f.dsn, CreateSlot: true, StatusInterval: 100 * time.Millisecond,
		HeartbeatInterval: -1, BufferBytes: bufferBytes, PartBytes: 128 << 10, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })

	before := f.insert(t, [3]string{"orders", "a", "before"})
	b := batch(t, src, limit)
	require.Equal(t, before, eventIDs(b))
	b.Done()
	baseline := heapInUse()

	startBig := f.walInsert(t)
	_, err = f.pool.Exec(ctx, `INSERT INTO herald_outbox (topic, key, payload)
		SELECT 'orders', 'big', convert_to(lpad(g::text, $2::int, '0'), 'UTF8') FROM generate_series(1, $1::int) g`, rows, payloadLen)
	require.NoError(t, err)
	afterBig := f.walInsert(t)
	after := f.insert(t, [3]string{"orders", "c", "after"})

	// checkBig checks the next events of the big transaction by their
	// payloads: 1, 2, ... in order.
	seen := 0
	var rest []string // the ids of the events after the big transaction
	checkBig := func(b herald.SourceBatch) {
		t.Helper()
		for _, e := range b.Events {
			if seen == rows {
				rest = append(rest, e.ID) // a whole transaction after the big one's last rows
				continue
			}
			// Checked by hand: a hundred thousand require calls are slow under -race.
			if n, err := strconv.Atoi(string(e.Payload)); err != nil || n != seen+1 || len(e.Payload) != payloadLen || e.Key != "big" {
				require.Failf(t, "not the next event of the big transaction", "event %d: key %q, payload %.20q...", seen+1, e.Key, e.Payload)
			}
			seen++
		}
	}

	// The consumer takes the first batch and is blocked from there on.
	started := time.Now()
	first := batch(t, src, limit)
	// The big transaction alone, a batch's worth: as many rows as fit in
	// BufferBytes, fewer than limit here.
	require.Less(t, len(first.Events), limit)
	require.LessOrEqual(t, len(first.Events)*payloadLen, bufferBytes, "a batch holds at most BufferBytes")
	require.Greater(t, 2*len(first.Events)*payloadLen, bufferBytes, "and about as much")
	checkBig(first)
	peak := uint64(0)
	sample := func() {
		if h := heapInUse(); h > baseline {
			peak = max(peak, h-baseline)
		}
	}
	// Wait until the stream is blocked and PostgreSQL with it: the
	// walsender waits to write once the stream stopped reading its socket.
	blocked := 0
	require.Eventually(t, func() bool {
		sample()
		var wait *string
		require.NoError(t, f.pool.QueryRow(ctx, `SELECT wait_event FROM pg_stat_activity
			WHERE pid = (SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'herald_outbox')`).Scan(&wait))
		if wait != nil && *wait == "WalSenderWriteData" {
			blocked++
		} else {
			blocked = 0
		}
		return blocked >= 10
	}, 60*time.Second, 100*time.Millisecond, "the walsender waits for the stream")
	for range 10 {
		time.Sleep(200 * time.Millisecond)
		sample()
	}
	blockedPeak := peak
	const whole = rows * payloadLen
	bound := uint64(3*bufferBytes + 4<<20)
	t.Logf("blocked: heap %.1f MiB over the baseline (%.1f MiB), bound %.1f MiB; the transaction's payloads alone are %.0f MiB",
		mib(blockedPeak), mib(baseline), mib(bound), mib(whole))
	require.Less(t, blockedPeak, bound, "the heap holds a few buffers while the consumer is blocked, not the transaction")
	require.Greater(t, uint64(whole), 10*bound, "the bound is far below what the whole transaction would take")

	// Unblocked: the rest, with every batch done but the big one's last.
	var last herald.SourceBatch
	for seen < rows {
		b := batch(t, src, limit)
		checkBig(b)
		if seen%(20*limit) == 0 {
			sample()
		}
		if seen == rows {
			last = b
			require.NotEmpty(t, b.Events)
		} else {
			b.Done()
		}
	}
	if len(rest) == 0 {
		b = batch(t, src, limit)
		rest = eventIDs(b)
		b.Done()
	}
	require.Equal(t, after, rest, "the transaction after the big one, whole")
	t.Logf("read %d events in %s; peak heap over the baseline while draining: %.1f MiB", rows, time.Since(started).Round(time.Millisecond), mib(peak))
	require.Less(t, peak, bound)

	f.staysAtOrBefore(t, startBig, "neither the big transaction's first nor last batch is done")
	first.Done()
	f.staysAtOrBefore(t, startBig, "its last batch is not done")
	last.Done()
	require.Eventually(t, func() bool { return f.slotConfirmed(t) > afterBig }, 20*time.Second, 20*time.Millisecond,
		"past the big transaction and the one after it once every batch is done")
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
