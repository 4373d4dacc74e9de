package heraldpg

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
)

// PollStreamed, the recovery from a lost slot, while a producer writes
// to a key: the streamed rows since the time given become ready, older
// ones stay as they are, new inserts are ready, and at no moment does
// the table hold a ready row of the key after a streamed row still
// waiting to be made ready (which a claim would publish first, out of
// order). Switching first and requeueing after would show that for the
// whole requeue.
func TestPollStreamedKeepsEachKeyInOrder(t *testing.T) {
	t.Parallel()
	o := newStreamOutbox(t)
	ctx := t.Context()
	require.NoError(t, o.d.StreamInserts(ctx, true))
	before := o.insert("t", "k", "created_at", "now() - interval '2 hours'")
	o.exec(`INSERT INTO ` + o.d.Table() + ` (topic, key, payload) SELECT 't', 'k', 'x' FROM generate_series(1, 3000)`)
	since := time.Now().Add(-time.Hour)

	stop := make(chan struct{})
	var (
		wg                   sync.WaitGroup
		written, looks, bad  atomic.Int64
		producerErr, lookErr atomic.Value
	)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := o.pool.Exec(ctx, `INSERT INTO `+o.d.Table()+` (topic, key, payload) VALUES ('t', 'k', 'x')`); err != nil {
				producerErr.Store(err)
				return
			}
			written.Add(1)
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			// One statement, one snapshot.
			var overtaken bool
			err := o.pool.QueryRow(ctx, `SELECT coalesce(
				min(seq) FILTER (WHERE state = 'streamed' AND created_at >= $1) < max(seq) FILTER (WHERE state = 'ready'), false)
				FROM `+o.d.Table()+` WHERE topic = 't' AND key = 'k'`, since).Scan(&overtaken)
			if err != nil {
				lookErr.Store(err)
				return
			}
			looks.Add(1)
			if overtaken {
				bad.Add(1)
			}
		}
	})
	// Small batches: the requeue takes many statements.
	n, err := o.d.PollStreamed(ctx, since, 50)
	require.NoError(t, err)
	// The producer goes on after the switch: its rows are ready.
	require.Eventually(t, func() bool { return written.Load() > int64(n)-3000+20 }, 30*time.Second, time.Millisecond)
	close(stop)
	wg.Wait()
	require.Nil(t, producerErr.Load())
	require.Nil(t, lookErr.Load())
	require.Positive(t, looks.Load())
	require.Zero(t, bad.Load(), "a ready row of the key came after a streamed one not yet made ready, in %d looks", looks.Load())

	require.GreaterOrEqual(t, n, 3000)
	state, err := o.d.InsertState(ctx)
	require.NoError(t, err)
	require.Equal(t, "ready", state)
	require.Equal(t, heraldadmin.StateStreamed, o.get(before).State, "a row from before the time given stays streamed")
	var streamed, ready int
	require.NoError(t, o.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'streamed'), count(*) FILTER (WHERE state = 'ready')
		FROM `+o.d.Table()).Scan(&streamed, &ready))
	require.Equal(t, 1, streamed)
	require.Equal(t, int(written.Load())+3000, ready, "every other row is ready")

	_, err = o.d.PollStreamed(ctx, since, 0)
	require.ErrorContains(t, err, "limit 0 is not positive")
}
