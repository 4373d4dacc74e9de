package faultsuite_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// PostgreSQL restarts (a fast shutdown: every connection cut, committed
// data kept) while producers commit and the relay claims, publishes and
// acknowledges. Producers see their transactions fail and retry; a commit
// whose answer was lost may or may not have happened, and either way its
// business rows and events must agree. The relay must ride the outage out
// and publish every committed event, without ghosts and in key order.
func TestPostgresRestartUnderLoad(t *testing.T) {
	testenv.Long(t)
	pc := testenv.PrivateCluster(t)
	conn, err := pgx.Connect(t.Context(), pc.DSN)
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), `CREATE SCHEMA fault`)
	require.NoError(t, err)
	require.NoError(t, conn.Close(context.Background()))

	w := newWorldOn(t, pc.DSN, "fault")
	const name = "fault-restart"
	r := w.startRelay(t, name, via{})
	watch := watchRelayTx(t, w.pool, name)
	stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 5 * time.Millisecond})

	// Restart while the relay holds batches it has not acknowledged.
	require.Eventually(t, func() bool { return w.published(t) >= 500 && r.relay.InFlight() > 0 }, time.Minute, time.Millisecond)
	before := r.relay.Stats().Published
	pc.Stop(t)
	require.Eventually(t, func() bool { return r.relay.Health().Database != "" }, time.Minute, time.Millisecond,
		"the relay did not notice the database was gone")
	pc.Start(t)
	require.Eventually(t, func() bool { return r.relay.Health().Database == "" && r.relay.Stats().Published > before+1000 },
		time.Minute, time.Millisecond, "the relay did not go back to work after the restart; its log:\n%s", r)
	stop()

	w.verify(t, observedBound(r), logsOf(r))
	watch.check(t)
	require.Zero(t, r.relay.Stats().Dead)
	t.Logf("acknowledgements retried across the restart: %d", strings.Count(r.log.String(), "acknowledging batch failed; retrying"))
}
