package heraldcdc

import (
	"math/rand/v2"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"
)

func TestTrackerConfirmsTheAcknowledgedPrefixOnly(t *testing.T) {
	t.Parallel()
	tr := NewTracker(100)
	a, err := tr.Add(200, 2)
	require.NoError(t, err)
	b, err := tr.Add(300, 1)
	require.NoError(t, err)
	c, err := tr.Add(400, 3)
	require.NoError(t, err)
	require.Equal(t, pglogrepl.LSN(100), tr.Confirmed())

	require.NoError(t, tr.Ack(b, 1))
	require.NoError(t, tr.Ack(c, 3))
	require.Equal(t, pglogrepl.LSN(100), tr.Confirmed(), "later transactions acknowledged first confirm nothing")
	require.NoError(t, tr.Ack(a, 1))
	require.Equal(t, pglogrepl.LSN(100), tr.Confirmed(), "half of a transaction is not a transaction")
	require.NoError(t, tr.Ack(a, 1))
	require.Equal(t, pglogrepl.LSN(400), tr.Confirmed(), "the whole prefix at once")
	require.Zero(t, tr.Pending())

	// A transaction without events is confirmed once all before it are.
	d, err := tr.Add(500, 1)
	require.NoError(t, err)
	_, err = tr.Add(600, 0)
	require.NoError(t, err)
	require.Equal(t, pglogrepl.LSN(400), tr.Confirmed())
	require.NoError(t, tr.Ack(d, 1))
	require.Equal(t, pglogrepl.LSN(600), tr.Confirmed())

	// Refusals: out of commit order, over-acknowledging.
	_, err = tr.Add(600, 1)
	require.ErrorContains(t, err, "not commit order")
	e, err := tr.Add(700, 1)
	require.NoError(t, err)
	require.Error(t, tr.Ack(e, 2))
	require.Error(t, tr.Ack(Txn{}, 1))
	require.Equal(t, pglogrepl.LSN(600), tr.Confirmed())
}

// Whatever order the acknowledgements come in, the confirmed position
// never passes a transaction with an unacknowledged event, and ends at
// the last one.
func TestTrackerNeverPassesAnUnacknowledgedEvent(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		tr := NewTracker(0)
		type ev struct {
			txn Txn
			end pglogrepl.LSN
		}
		var events []ev
		var ends []pglogrepl.LSN
		total := map[pglogrepl.LSN]int{}
		for i := range 1 + rng.IntN(30) {
			end := pglogrepl.LSN(10 * (i + 1))
			n := rng.IntN(4)
			txn, err := tr.Add(end, n)
			require.NoError(t, err)
			ends = append(ends, end)
			total[end] = n
			for range n {
				events = append(events, ev{txn, end})
			}
		}
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		acked := map[pglogrepl.LSN]int{}
		for _, e := range events {
			require.NoError(t, tr.Ack(e.txn, 1))
			acked[e.end]++
			conf := tr.Confirmed()
			// Every event of every transaction at or before conf is acknowledged.
			for end, n := range total {
				if end <= conf {
					require.Equal(t, n, acked[end], "seed %d: confirmed %s past an unacknowledged event of %s", seed, conf, end)
				}
			}
		}
		require.Equal(t, ends[len(ends)-1], tr.Confirmed(), "seed %d", seed)
	}
}
