package heraldinbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldinbox"
)

func order(id string, version int64) heraldinbox.Aggregate {
	return heraldinbox.Aggregate{Type: "order", ID: id, Version: version}
}

// requireStale checks that err refuses a as stale after last.
func requireStale(t *testing.T, err error, a heraldinbox.Aggregate, last int64) {
	t.Helper()
	require.ErrorIs(t, err, heraldinbox.ErrStale)
	var stale *heraldinbox.StaleError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, a, stale.Aggregate)
	require.Equal(t, last, stale.Last, "the last version handled")
}

func TestAggregateVersionsRefuseWhatIsNotNewer(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		first, third := herald.NewID(), herald.NewID()
		ok, err := b.advance(ctx, "billing", first, order("o-1", 1), nil)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = b.advance(ctx, "billing", third, order("o-1", 3), nil)
		require.NoError(t, err, "newer, past a gap")
		require.True(t, ok)

		equal := herald.NewID() // another event claiming version 3
		ok, err = b.advance(ctx, "billing", equal, order("o-1", 3), nil)
		requireStale(t, err, order("o-1", 3), 3)
		require.False(t, ok)
		older := herald.NewID()
		_, err = b.advance(ctx, "billing", older, order("o-1", 2), nil)
		requireStale(t, err, order("o-1", 2), 3)

		require.Equal(t, []int64{1, 3}, b.applied(t, "o-1"), "refused events had no effect")
		v, found := b.version(t, "billing", order("o-1", 0))
		require.True(t, found)
		require.Equal(t, int64(3), v)

		// A stale event rolled back with its inbox record: its redelivery
		// is refused again, not skipped as a duplicate. An applied one's
		// redelivery is a duplicate, found before any version check.
		_, err = b.advance(ctx, "billing", older, order("o-1", 2), nil)
		requireStale(t, err, order("o-1", 2), 3)
		ok, err = b.advance(ctx, "billing", third, order("o-1", 3), nil)
		require.NoError(t, err)
		require.False(t, ok)

		// Versions are per consumer, aggregate type and aggregate id.
		for _, c := range []struct {
			consumer string
			a        heraldinbox.Aggregate
		}{
			{"search", order("o-1", 2)},
			{"billing", heraldinbox.Aggregate{Type: "invoice", ID: "o-1", Version: 1}},
			{"billing", order("o-2", 1)},
			{"billing", heraldinbox.Aggregate{ID: "o-1", Version: 1}}, // no type
		} {
			_, err := b.advance(ctx, c.consumer, herald.NewID(), c.a, nil)
			require.NoError(t, err, "%+v", c)
		}
		v, _ = b.version(t, "billing", order("o-1", 0))
		require.Equal(t, int64(3), v, "untouched by the others")
	})
}

// A handler that fails after advancing the version rolls the version back
// with its effects: the redelivery is newer again and applies.
func TestAggregateVersionRollsBackWithTheHandler(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		// A new aggregate: the failed handler leaves no row at all.
		id := herald.NewID()
		_, err := b.advance(ctx, "billing", id, order("o-1", 5), fail)
		require.ErrorIs(t, err, errHandler)
		_, found := b.version(t, "billing", order("o-1", 0))
		require.False(t, found)
		ok, err := b.advance(ctx, "billing", id, order("o-1", 5), nil)
		require.NoError(t, err)
		require.True(t, ok)

		// An aggregate with a version: the failed handler leaves it.
		id = herald.NewID()
		_, err = b.advance(ctx, "billing", id, order("o-1", 6), fail)
		require.ErrorIs(t, err, errHandler)
		v, _ := b.version(t, "billing", order("o-1", 0))
		require.Equal(t, int64(5), v)
		ok, err = b.advance(ctx, "billing", id, order("o-1", 6), nil)
		require.NoError(t, err, "the redelivery")
		require.True(t, ok)
		v, _ = b.version(t, "billing", order("o-1", 0))
		require.Equal(t, int64(6), v)
		require.Equal(t, []int64{5, 6}, b.applied(t, "o-1"))
	})
}

// Events without a version are not checked and record nothing, before and
// after versioned events of the same aggregate.
func TestEventsWithoutVersionPassThrough(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		for range 2 {
			ok, err := b.advance(ctx, "billing", herald.NewID(), order("o-1", 0), nil)
			require.NoError(t, err)
			require.True(t, ok)
		}
		_, found := b.version(t, "billing", order("o-1", 0))
		require.False(t, found, "nothing recorded")
		_, err := b.advance(ctx, "billing", herald.NewID(), order("o-1", 2), nil)
		require.NoError(t, err)
		ok, err := b.advance(ctx, "billing", herald.NewID(), order("o-1", 0), nil)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = b.advance(ctx, "billing", herald.NewID(), heraldinbox.Aggregate{}, nil)
		require.NoError(t, err, "no aggregate at all")
		v, _ := b.version(t, "billing", order("o-1", 0))
		require.Equal(t, int64(2), v)
		require.Equal(t, []int64{0, 0, 2, 0}, b.applied(t, "o-1"))
		require.Len(t, b.applied(t, ""), 5)
	})
}

// An inbox made before the version check (its migration 001 only) takes
// the next migration and keeps its records.
func TestInboxWithoutVersionTableIsMigrated(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		id := herald.NewID()
		_, err := b.process(ctx, "billing", id, false)
		require.NoError(t, err)
		b.exec(t, `DROP TABLE `+b.ib.VersionTable())
		_, err = b.advance(ctx, "billing", herald.NewID(), order("o-1", 1), nil)
		require.Error(t, err, "no version table")
		require.NoError(t, b.migrate(ctx))
		_, err = b.advance(ctx, "billing", herald.NewID(), order("o-1", 1), nil)
		require.NoError(t, err)
		ok, err := b.process(ctx, "billing", id, false)
		require.NoError(t, err)
		require.False(t, ok, "the inbox's record was kept")
	})
}

func TestAggregateOfReadsTheMessage(t *testing.T) {
	t.Parallel()
	m := herald.Message{AggregateType: "order", AggregateID: "o-1", AggregateVersion: 7, Key: "k"}
	require.Equal(t, order("o-1", 7), heraldinbox.AggregateOf(m))
}

func TestAdvanceRefusesBadInput(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		for _, c := range []struct {
			consumer string
			a        heraldinbox.Aggregate
		}{
			{"billing", order("o-1", -1)},
			{"billing", heraldinbox.Aggregate{Type: "order", Version: 1}},
			{"", order("o-1", 1)},
			{"bill\x00ing", order("o-1", 1)},
			{"billing", order("o\x001", 1)},
			{"billing", order(strings.Repeat("x", herald.MaxTextFieldLen+1), 1)},
			{"billing", order("o-\xff", 1)},
			{"billing", heraldinbox.Aggregate{Type: "\xff", ID: "o-1", Version: 1}},
		} {
			_, err := b.advance(ctx, c.consumer, herald.NewID(), c.a, nil)
			require.Error(t, err, "%q %+v", c.consumer, c.a)
			require.NotErrorIs(t, err, heraldinbox.ErrStale)
		}
		require.Empty(t, b.applied(t, ""))
		// The longest aggregate type and id fit the columns.
		long := heraldinbox.Aggregate{Type: strings.Repeat("t", herald.MaxTextFieldLen), ID: strings.Repeat("é", herald.MaxTextFieldLen/2), Version: 1}
		_, err := b.advance(ctx, strings.Repeat("c", heraldinbox.MaxKeyLen), herald.NewID(), long, nil)
		require.NoError(t, err)
		_, err = b.advance(ctx, strings.Repeat("c", heraldinbox.MaxKeyLen), herald.NewID(), long, nil)
		require.ErrorIs(t, err, heraldinbox.ErrStale)
	})
}

func TestPgxMethodsRefuseAnotherDatabasesInbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, mk := range []func(*heraldinbox.Config) (*heraldinbox.Inbox, error){heraldinbox.NewSQLite, heraldinbox.NewMySQL} {
		ib, err := mk(nil)
		require.NoError(t, err)
		err = ib.AdvancePgx(ctx, nil, "billing", order("o-1", 1))
		require.ErrorContains(t, err, "NewPostgres")
		_, err = ib.ProcessPgx(ctx, nil, "billing", herald.NewID(), func(context.Context, pgx.Tx) error { return nil })
		require.ErrorContains(t, err, "NewPostgres")
	}
}

// Two deliveries advancing one aggregate at the same moment: the second
// waits for the first's row lock, then compares with what the first
// committed. Each case holds the first inside its transaction, its version
// advanced, until the second is seen waiting, then ends it.
func TestRacingAdvancesMeetAtTheAggregatesRow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		existing   int64 // the aggregate's version before, 0 for none
		first      int64
		firstFails bool
		second     int64
		secondWins bool
		want       int64 // the version after both
	}{
		{"NewAggregateSameVersionIsRefused", 0, 5, false, 5, false, 5},
		{"NewAggregateOlderVersionIsRefused", 0, 5, false, 4, false, 5},
		{"NewAggregateNewerVersionFollows", 0, 5, false, 6, true, 6},
		{"NewAggregateFirstRollsBack", 0, 5, true, 5, true, 5},
		{"SameVersionIsRefused", 3, 5, false, 5, false, 5},
		{"OlderVersionIsRefused", 3, 5, false, 4, false, 5},
		{"NewerVersionFollows", 3, 5, false, 6, true, 6},
		{"FirstRollsBack", 3, 5, true, 4, true, 4},
	}
	for name, mk := range backends {
		if name == "SQLite" {
			continue // one writer at a time: see TestRacingDeliveriesApplyVersionsInOrder
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := mk(t)
			require.NotNil(t, b.lockWaiters)
			for i, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					agg := fmt.Sprintf("o-%d", i)
					if c.existing > 0 {
						_, err := b.advance(ctx, "billing", herald.NewID(), order(agg, c.existing), nil)
						require.NoError(t, err)
					}
					inside, release := make(chan struct{}), make(chan struct{})
					first := make(chan error, 1)
					go func() {
						ok, err := b.advance(ctx, "billing", herald.NewID(), order(agg, c.first), func() error {
							close(inside)
							<-release
							if c.firstFails {
								return errHandler
							}
							return nil
						})
						if err == nil && !ok {
							err = errors.New("the first delivery was not processed")
						}
						first <- err
					}()
					select {
					case <-inside:
					case err := <-first:
						t.Fatalf("the first delivery ended before its handler's end: %v", err)
					}
					type result struct {
						ok  bool
						err error
					}
					second := make(chan result, 1)
					go func() {
						ok, err := b.advance(ctx, "billing", herald.NewID(), order(agg, c.second), nil)
						second <- result{ok, err}
					}()
					// The second is now blocked on the first's row lock;
					// it must not end before the first does.
					require.Eventually(t, func() bool { return len(second) > 0 || b.lockWaiters(t) > 0 }, 30*time.Second, 5*time.Millisecond,
						"the second delivery never waited for the first")
					select {
					case r := <-second:
						t.Fatalf("the second delivery did not wait for the first: %+v", r)
					default:
					}
					close(release)
					if c.firstFails {
						require.ErrorIs(t, <-first, errHandler)
					} else {
						require.NoError(t, <-first)
					}
					r := <-second
					if c.secondWins {
						require.NoError(t, r.err)
						require.True(t, r.ok)
					} else {
						requireStale(t, r.err, order(agg, c.second), c.first)
						require.False(t, r.ok)
					}
					v, _ := b.version(t, "billing", order(agg, 0))
					require.Equal(t, c.want, v)
				})
			}
		})
	}
}

// Many deliveries of three aggregates' events (neighbours in the versions
// table's key order, so that on MySQL their locks meet in the index too),
// replayed and shuffled, on 8 connections at once: the versions applied to
// each aggregate, in the order their effects were written, rise strictly;
// its last version is applied; every other delivery is a duplicate or
// refused as stale, never an error (a deadlock included).
func TestRacingDeliveriesApplyVersionsInOrder(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const versions = 30
		aggregates := []string{"o-1", "o-2", "o-3"}
		type delivery struct {
			id, aggregate string
			version       int64
		}
		var deliveries []delivery
		for _, agg := range aggregates {
			for v := int64(1); v <= versions; v++ {
				id := herald.NewID()
				// Each event twice, and an event of another id claiming
				// the same version (a replay from another source).
				deliveries = append(deliveries, delivery{id, agg, v}, delivery{id, agg, v}, delivery{herald.NewID(), agg, v})
			}
		}
		rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

		var (
			applied, duplicate, stale atomic.Int64
			next                      atomic.Int64
			wg                        sync.WaitGroup
		)
		for range 8 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= len(deliveries) {
						return
					}
					d := deliveries[i]
					ok, err := b.advance(ctx, "billing", d.id, order(d.aggregate, d.version), nil)
					switch {
					case errors.Is(err, heraldinbox.ErrStale):
						stale.Add(1)
					case err != nil:
						t.Error(err)
						return
					case ok:
						applied.Add(1)
					default:
						duplicate.Add(1)
					}
				}
			})
		}
		wg.Wait()
		require.Equal(t, int64(len(deliveries)), applied.Load()+duplicate.Load()+stale.Load())
		require.Len(t, b.applied(t, ""), int(applied.Load()))
		for _, agg := range aggregates {
			got := b.applied(t, agg)
			require.NotEmpty(t, got)
			require.True(t, slices.IsSorted(got) && len(slices.Compact(slices.Clone(got))) == len(got),
				"versions of %s applied out of order or twice: %v", agg, got)
			require.Equal(t, int64(versions), got[len(got)-1], "the last version is always applied")
			v, _ := b.version(t, "billing", order(agg, 0))
			require.Equal(t, int64(versions), v)
		}
		t.Logf("%d applied, %d duplicates, %d stale", applied.Load(), duplicate.Load(), stale.Load())
	})
}
