package heraldcdc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The zero-bloat write mode (heraldpg.Config.DeleteAfterInsert): the
// producer inserts and deletes each event in its own transaction, so the
// table keeps nothing of it, and the relay publishes it from the WAL,
// which does. A failure goes to the table as ever: Return inserts the
// event again, whole, and the polling path retries it.
func TestZeroBloatWritesArePublishedFromTheLog(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	w, err := heraldpg.NewWriter(&heraldpg.Config{DeleteAfterInsert: true})
	require.NoError(t, err)
	// Key k2's fourth event fails once (an ordinary, retried error).
	const failing = "k2-03"
	rec := startFailOnceRelay(t, f, failing)

	// Eight transactions, each with two events of each of five keys: the
	// even ones in one WriteTx (the array insert), the odd ones one
	// WriteTx per event (the single-row insert).
	const keys, txs, perTx = 5, 8, 2
	var (
		byKey   = map[string][]string{} // key -> ids in commit order
		byName  = map[string]string{}   // payload -> id
		counter = map[string]int{}
	)
	for i := range txs {
		var msgs []herald.Message
		for range perTx {
			for k := range keys {
				key := fmt.Sprintf("k%d", k)
				name := fmt.Sprintf("%s-%02d", key, counter[key])
				counter[key]++
				msgs = append(msgs, herald.Message{ID: herald.NewID(), Topic: "orders", Key: key, Payload: []byte(name)})
				byName[name] = msgs[len(msgs)-1].ID
			}
		}
		require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			if i%2 == 0 {
				return w.WriteTx(ctx, tx, msgs...)
			}
			for _, m := range msgs {
				if err := w.WriteTx(ctx, tx, m); err != nil {
					return err
				}
			}
			return nil
		}))
		for _, m := range msgs {
			byKey[m.Key] = append(byKey[m.Key], m.ID)
		}
	}
	written := f.walInsert(t)

	waitAllPublished(t, rec, byKey)
	// Heartbeats carry the slot past the writes only once every batch is
	// settled: published or written back.
	require.Eventually(t, func() bool { return f.slotConfirmed(t) >= written }, 60*time.Second, 20*time.Millisecond,
		"the slot's confirmed position moves past the writes")

	t.Run("EachKeyIsPublishedInCommitOrder", func(t *testing.T) {
		first, _ := firstPublishedByKey(rec)
		require.Equal(t, byKey, first)
	})

	t.Run("TheFailedEventIsRetriedFromTheTable", func(t *testing.T) {
		requireFailedOnceThenPublished(t, rec, byName[failing])
	})

	// What remains: the failed event, re-inserted by Return and published
	// by a claim, and the later events of its key that were written back
	// behind it; nothing of any other key, and no streamed row.
	t.Run("TheTableHoldsOnlyWhatWasWrittenBack", func(t *testing.T) {
		rows, err := f.pool.Query(ctx, `SELECT id::text, key, state, attempts FROM herald_outbox`)
		require.NoError(t, err)
		type kept struct {
			key, state string
			attempts   int
		}
		left := map[string]kept{}
		for rows.Next() {
			var (
				id string
				r  kept
			)
			require.NoError(t, rows.Scan(&id, &r.key, &r.state, &r.attempts))
			left[id] = r
		}
		require.NoError(t, rows.Err())
		require.Equal(t, kept{key: "k2", state: "published", attempts: 2}, left[byName[failing]],
			"the stream's attempt and one claim")
		later := map[string]bool{}
		for _, id := range byKey["k2"][4:] {
			later[id] = true
		}
		for id, r := range left {
			require.Equal(t, "published", r.state, "event %s", id)
			require.True(t, id == byName[failing] || later[id], "event %s of key %s has a row", id, r.key)
		}
	})
}
