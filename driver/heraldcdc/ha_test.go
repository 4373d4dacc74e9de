package heraldcdc_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/internal/testenv"
)

// standbyInterval is how often the standbys of these tests try the slot.
const standbyInterval = 100 * time.Millisecond

// haConfig is a Source's config without heartbeats (only Done moves the
// slot), logging to logs.
func (f fixture) haConfig(logs *testenv.LogBuffer) heraldcdc.Config {
	return heraldcdc.Config{ConnString: f.dsn, StatusInterval: 100 * time.Millisecond, HeartbeatInterval: -1,
		StandbyInterval: standbyInterval, Logger: slog.New(slog.NewTextHandler(logs, nil))}
}

func newHASource(t *testing.T, cfg heraldcdc.Config) *heraldcdc.Source {
	t.Helper()
	src, err := heraldcdc.NewSource(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	return src
}

// A second Source on a slot that another streams does not fail: it stands
// by, confirming and reading nothing, while the first streams and
// confirms. Once the first is closed, the second takes the slot within a
// few StandbyIntervals and delivers exactly what the first did not finish:
// the batch handed out and not done, and what the first never handed out.
func TestASecondSourceStandsByAndTakesOverWhereTheFirstLeft(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	firstLogs, secondLogs := &testenv.LogBuffer{}, &testenv.LogBuffer{}
	cfg := f.haConfig(firstLogs)
	cfg.CreateSlot = true
	first := newHASource(t, cfg)
	require.True(t, first.Active())

	second := newHASource(t, f.haConfig(secondLogs))
	require.False(t, second.Active(), "another reader holds the slot")
	require.Contains(t, secondLogs.String(), "standing by: slot herald_outbox is streamed by another relay (pid ")

	tx1 := f.insertMany(t, 3, "a")
	afterTx1 := f.walInsert(t)
	tx2 := f.insertMany(t, 3, "b")
	afterTx2 := f.walInsert(t)
	tx3 := f.insertMany(t, 3, "c")
	tx4 := f.insertMany(t, 2, "d")

	// Next waits while the other reader streams, for as long as ctx lets
	// it: several StandbyIntervals here.
	ctx, cancel := context.WithTimeout(context.Background(), 6*standbyInterval)
	_, err := second.Next(ctx, 10)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, second.Active())
	require.Equal(t, 1, strings.Count(secondLogs.String(), "standing by"), "said once per wait:\n%s", secondLogs)

	// The first streams: limits of 3 give one transaction a batch. Two are
	// done, the third is handed out and not done, the fourth is left in
	// the first's buffer.
	b1, b2, b3 := batch(t, first, 3), batch(t, first, 3), batch(t, first, 3)
	require.Equal(t, tx1, eventIDs(b1))
	require.Equal(t, tx2, eventIDs(b2))
	require.Equal(t, tx3, eventIDs(b3))
	b1.Done()
	b2.Done()
	require.Eventually(t, func() bool { return f.slotConfirmed(t) > afterTx1 }, 20*time.Second, 20*time.Millisecond,
		"the first confirms while the second stands by")
	f.staysAtOrBefore(t, afterTx2, "nothing past what the first's batches did: the standby confirms nothing")

	// The second waits in Next, trying the slot every StandbyInterval, as
	// the first closes.
	type result struct {
		b   herald.SourceBatch
		err error
	}
	waiting := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := second.Next(ctx, 10)
		waiting <- result{b, err}
	}()
	time.Sleep(3 * standbyInterval)
	closed := time.Now()
	require.NoError(t, first.Close())
	require.False(t, first.Active())
	r := <-waiting
	require.NoError(t, r.err)
	took := time.Since(closed)
	t.Logf("the second took over %s after the first closed", took)
	require.Less(t, took, 20*standbyInterval, "within a few StandbyIntervals (and the walsender's exit)")
	got := eventIDs(r.b)
	r.b.Done()
	for len(got) < len(tx3)+len(tx4) {
		b := batch(t, second, 10)
		got = append(got, eventIDs(b)...)
		b.Done()
	}
	require.Equal(t, append(append([]string{}, tx3...), tx4...), got,
		"from where the first confirmed: its undone batch and what it never handed out, each once")
	require.True(t, second.Active())
	require.Equal(t, 1, strings.Count(secondLogs.String(), "took over slot herald_outbox"), secondLogs.String())
	require.Equal(t, 1, strings.Count(secondLogs.String(), "standing by"), secondLogs.String())

	// And it goes on streaming what comes next, and only that.
	tx5 := f.insertMany(t, 2, "e")
	b := batch(t, second, 10)
	require.Equal(t, tx5, eventIDs(b))
	b.Done()
	ctx, cancel = context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = second.Next(ctx, 10)
	require.ErrorIs(t, err, context.DeadlineExceeded, "nothing more")
}

// Two readers that open the slot at the same moment both pass the check of
// pg_replication_slots; START_REPLICATION lets one through and refuses the
// other with SQLSTATE 55006, which Open reports as a *SlotInUseError and a
// Source waits out. Every round ends with exactly one reader.
func TestReadersOpeningTogetherGetOneStream(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.open(t, true).Close())
	f.awaitSlotIdle(t)
	logs := &testenv.LogBuffer{}
	cfg := f.haConfig(logs)

	fenced := 0
	for range 10 {
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			streams [2]*heraldcdc.Stream
			errs    [2]error
		)
		for i := range 2 {
			wg.Go(func() {
				<-start
				streams[i], errs[i] = heraldcdc.Open(context.Background(), cfg)
			})
		}
		close(start)
		wg.Wait()
		opened := 0
		for i := range 2 {
			if errs[i] == nil {
				opened++
				require.NoError(t, streams[i].Close())
				continue
			}
			var inUse *heraldcdc.SlotInUseError
			require.ErrorAs(t, errs[i], &inUse)
			require.Equal(t, "herald_outbox", inUse.Slot)
			var pgErr *pgconn.PgError
			if errors.As(errs[i], &pgErr) {
				require.Equal(t, "55006", pgErr.Code)
				fenced++
			}
		}
		require.Equal(t, 1, opened, "one reader per slot: %v", errs)
		f.awaitSlotIdle(t)
	}
	t.Logf("%d of 10 rounds were decided by START_REPLICATION's refusal, the others by pg_replication_slots", fenced)

	// The same race between two Sources: neither fails, one streams.
	var (
		wg   sync.WaitGroup
		srcs [2]*heraldcdc.Source
		errs [2]error
	)
	for i := range 2 {
		wg.Go(func() { srcs[i], errs[i] = heraldcdc.NewSource(context.Background(), cfg) })
	}
	wg.Wait()
	for i := range 2 {
		require.NoError(t, errs[i])
		t.Cleanup(func() { _ = srcs[i].Close() })
	}
	require.NotEqual(t, srcs[0].Active(), srcs[1].Active(), "exactly one holds the slot")
}

func TestStandbyIntervalIsChecked(t *testing.T) {
	t.Parallel()
	_, err := heraldcdc.NewSource(context.Background(), heraldcdc.Config{ConnString: "postgres://u@127.0.0.1:1/db",
		StandbyInterval: time.Millisecond})
	require.ErrorContains(t, err, "Config.StandbyInterval 1ms must be at least 10ms")
	_, err = heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: "postgres://u@127.0.0.1:1/db",
		StandbyInterval: -time.Second})
	require.ErrorContains(t, err, "Config.StandbyInterval")
}
