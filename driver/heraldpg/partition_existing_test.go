package heraldpg_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
)

// The documented migration from a plain table: PartitionExisting while a
// relay publishes and producers write. Nothing is lost or published
// twice, the rows written before keep their place (the plain table is now
// the partition of the past), every event written after lands in the
// partitioned table, and seq goes on increasing.
func TestPartitionExistingWhileARelayRunsLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setup(t)
	before := b.WriteN("before", 300)
	dead := b.Write(herald.Message{Topic: "dead", Key: "k", Payload: []byte("x")})
	_, err := b.Pool.Exec(ctx, `UPDATE `+b.Store.Table()+` SET state = 'dead', dead_at = now(), last_error = 'refused'
		WHERE id = $1`, dead[0])
	require.NoError(t, err)

	rec := heralddrivertest.NewRecorder()
	heralddrivertest.StartRelay(t, b.Store, rec, func(c *herald.RelayConfig) {
		c.CleanupInterval = 20 * time.Millisecond // retention runs throughout
	})

	var (
		written []string
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := herald.Message{Topic: "during", Key: fmt.Sprintf("k%d", i%7), Payload: []byte(fmt.Sprint(w, i))}
				tx, err := b.Driver.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if err := tx.Write(ctx, m); err != nil {
					t.Error(err)
					return
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return rec.Count(before[len(before)-1]) > 0 || len(rec.Order()) > 100 },
		time.Minute, 5*time.Millisecond)
	require.NoError(t, b.Store.PartitionExisting(ctx, &heraldpg.Partitioning{Interval: time.Hour}))
	// The producers go on a while on the partitioned table (whose
	// partition of the past, until the end of the next hour, is the plain
	// table).
	var atConversion int64
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT max(seq) FROM `+b.Store.Table()).Scan(&atConversion))
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.Store.Table()+` WHERE seq > $1`,
			atConversion+100).Scan(&n))
		return n > 0
	}, time.Minute, 5*time.Millisecond, "producers write on")
	close(stop)
	wg.Wait()

	rows, err := b.Pool.Query(ctx, `SELECT id::text FROM `+b.Store.Table()+` WHERE topic = 'during'`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		written = append(written, id)
	}
	require.NoError(t, rows.Err())
	rec.RequireAllDeliveredOnce(t, append(before, written...))

	var relkind string
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT relkind::text FROM pg_class WHERE oid = $1::regclass`,
		b.Store.Table()).Scan(&relkind))
	require.Equal(t, "p", relkind)
	var dupSeq int64
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) - count(DISTINCT seq) FROM `+b.Store.Table()).Scan(&dupSeq))
	require.Zero(t, dupSeq, "seq stays unique across the conversion")
	ev, err := b.Store.GetEvent(ctx, dead[0])
	require.NoError(t, err)
	require.Equal(t, heraldadmin.StateDead, ev.State)

	// Converting again changes nothing; Migrate goes on working.
	require.NoError(t, b.Store.PartitionExisting(ctx, nil))
	require.NoError(t, b.Store.Migrate(context.Background()))
}
