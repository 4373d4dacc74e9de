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

// A transaction handed out in parts: learnt at its first part, growing by
// each part, confirmed once its end is known and every event of every
// part is acknowledged, whichever comes last.
func TestTrackerConfirmsATransactionOfPartsOnlyWhenEndedAndAcknowledged(t *testing.T) {
	t.Parallel()
	// Each step acts on the transaction numbered txn (in the order Begin
	// or Add made them) and says what is confirmed after it, or the
	// error.
	type step struct {
		do   string // begin, grow, finish, add, ack
		txn  int
		n    int
		end  pglogrepl.LSN
		want pglogrepl.LSN
		err  string
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"PartsAckedOutOfOrder", []step{
			{do: "begin", want: 100},
			{do: "grow", n: 2, want: 100},
			{do: "grow", n: 3, want: 100},
			{do: "ack", n: 3, want: 100},
			{do: "ack", n: 2, want: 100},
			{do: "finish", end: 200, want: 200},
		}},
		{"EndArrivesAfterEveryAck", []step{
			{do: "begin", want: 100},
			{do: "grow", n: 2, want: 100},
			{do: "ack", n: 2, want: 100},
			{do: "grow", want: 100}, // a last part of polled rows only
			{do: "finish", end: 200, want: 200},
		}},
		{"EndArrivesBeforeTheLastAck", []step{
			{do: "begin", want: 100},
			{do: "grow", n: 1, want: 100},
			{do: "ack", n: 1, want: 100},
			{do: "grow", n: 2, want: 100},
			{do: "finish", end: 200, want: 100},
			{do: "ack", n: 1, want: 100},
			{do: "ack", n: 1, want: 200},
		}},
		{"ATransactionWithoutEventsIsConfirmedAtItsEnd", []step{
			{do: "begin", want: 100},
			{do: "grow", want: 100},
			{do: "finish", end: 200, want: 200},
		}},
		{"AnUnacknowledgedEarlierTransactionHoldsAFinishedLaterOne", []step{
			{do: "add", end: 200, n: 1, want: 100},
			{do: "begin", txn: 1, want: 100},
			{do: "grow", txn: 1, n: 4, want: 100},
			{do: "ack", txn: 1, n: 4, want: 100},
			{do: "finish", txn: 1, end: 300, want: 100},
			{do: "ack", txn: 0, n: 1, want: 300},
		}},
		{"AnUnfinishedTransactionHoldsNothingBehindIt", []step{
			{do: "add", end: 200, n: 1, want: 100},
			{do: "begin", txn: 1, want: 100},
			{do: "ack", txn: 0, n: 1, want: 200},
			{do: "grow", txn: 1, n: 1, want: 200},
			{do: "ack", txn: 1, n: 1, want: 200},
			{do: "finish", txn: 1, end: 300, want: 300},
		}},
		{"NothingBeginsBeforeTheOpenOneEnds", []step{
			{do: "begin", want: 100},
			{do: "begin", txn: 1, want: 100, err: "not commit order"},
			{do: "add", txn: 1, end: 300, n: 1, want: 100, err: "not commit order"},
			{do: "finish", end: 200, want: 200},
		}},
		{"AckingMoreThanThePartsSoFar", []step{
			{do: "begin", want: 100},
			{do: "grow", n: 2, want: 100},
			{do: "ack", n: 3, want: 100, err: "2 outstanding"},
			{do: "ack", n: 2, want: 100},
		}},
		{"AnEndOutOfOrderLeavesItOpen", []step{
			{do: "add", end: 200, n: 0, want: 200},
			{do: "begin", txn: 1, want: 200},
			{do: "finish", txn: 1, end: 200, want: 200, err: "not commit order"},
			{do: "grow", txn: 1, n: 1, want: 200},
			{do: "finish", txn: 1, end: 300, want: 200},
			{do: "ack", txn: 1, n: 1, want: 300},
		}},
		{"NothingGrowsOrEndsTwiceOnceFinished", []step{
			{do: "begin", want: 100},
			{do: "finish", end: 200, want: 200},
			{do: "grow", n: 1, want: 200, err: "finished"},
			{do: "finish", end: 300, want: 200, err: "finished"},
			{do: "add", txn: 1, end: 300, n: 1, want: 200},
			{do: "finish", txn: 1, end: 400, want: 200, err: "finished"},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tr := NewTracker(100)
			var txns []Txn
			for i, s := range c.steps {
				var err error
				switch s.do {
				case "begin", "add":
					var txn Txn
					if s.do == "begin" {
						txn, err = tr.Begin()
					} else {
						txn, err = tr.Add(s.end, s.n)
					}
					if err == nil {
						require.Len(t, txns, s.txn, "step %d", i)
						txns = append(txns, txn)
					}
				case "grow":
					err = tr.Grow(txns[s.txn], s.n)
				case "finish":
					err = tr.Finish(txns[s.txn], s.end)
				case "ack":
					err = tr.Ack(txns[s.txn], s.n)
				}
				if s.err != "" {
					require.ErrorContains(t, err, s.err, "step %d", i)
				} else {
					require.NoError(t, err, "step %d", i)
				}
				require.Equal(t, s.want, tr.Confirmed(), "step %d (%s)", i, s.do)
			}
		})
	}
}

// Transactions read in parts, with acknowledgements of the events handed
// out so far coming back in any order between the parts: the confirmed
// position never passes a transaction whose end is unknown or that has
// an unacknowledged event, and ends at the last one.
func TestTrackerNeverPassesAnUnfinishedTransaction(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 11))
		tr := NewTracker(0)
		type txnInfo struct {
			end             pglogrepl.LSN
			total, acked    int
			finished        bool
			parts, partsNow int
		}
		var (
			txs     []*txnInfo
			txnOf   []Txn
			handed  []int // the transaction of each event handed out and not acknowledged
			cur     Txn
			reading = -1 // index of the transaction whose parts are being read
		)
		nTxs := 1 + rng.IntN(15)
		check := func() {
			conf := tr.Confirmed()
			for i, x := range txs {
				if x.end <= conf && x.finished {
					require.Equal(t, x.total, x.acked, "seed %d: confirmed %s past an unacknowledged event of transaction %d", seed, conf, i)
				}
				if !x.finished {
					require.LessOrEqual(t, conf, pglogrepl.LSN(10*i), "seed %d: confirmed %s past an unfinished transaction %d", seed, conf, i)
				}
			}
		}
		for len(txs) < nTxs || reading >= 0 || len(handed) > 0 {
			if len(handed) > 0 && rng.IntN(2) == 0 {
				// Acknowledge a random event handed out.
				j := rng.IntN(len(handed))
				i := handed[j]
				handed = append(handed[:j], handed[j+1:]...)
				require.NoError(t, tr.Ack(txnOf[i], 1))
				txs[i].acked++
				check()
				continue
			}
			if reading < 0 {
				if len(txs) == nTxs {
					continue
				}
				var err error
				cur, err = tr.Begin()
				require.NoError(t, err)
				txs = append(txs, &txnInfo{end: pglogrepl.LSN(10 * (len(txs) + 1)), parts: 1 + rng.IntN(3)})
				txnOf = append(txnOf, cur)
				reading = len(txs) - 1
			}
			x := txs[reading]
			n := rng.IntN(4)
			require.NoError(t, tr.Grow(cur, n))
			x.total += n
			for range n {
				handed = append(handed, reading)
			}
			x.partsNow++
			if x.partsNow == x.parts {
				require.NoError(t, tr.Finish(cur, x.end))
				x.finished = true
				reading = -1
			}
			check()
		}
		require.Equal(t, txs[len(txs)-1].end, tr.Confirmed(), "seed %d", seed)
		require.Zero(t, tr.Pending())
	}
}
