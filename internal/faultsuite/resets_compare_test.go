package faultsuite_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// resetEvery is how often the comparison cuts the relay's database
// connections.
const resetEvery = 1500 * time.Millisecond

// The relay's database connections are cut every 1.5 s under load, the
// same scenario on PostgreSQL and on MySQL (MariaDB here), one after the
// other in one run: on each, nothing is lost and each key's order is
// kept, and the relay recovers its claims at once. A claim whose answer a
// reset lost is released by its token as soon as the database answers
// again, never left to its lease (3 s here) and the rescuer: the relay
// rescues only rows whose acknowledgement the database could not commit
// within the lease (a server slowed by other work can take longer than
// the 1.5 s between resets), and no event waits anywhere near two leases
// from its producer's commit to the broker.
//
// The p99 of that time on each database is logged and compared, not
// checked: on a shared two-core machine either moves by hundreds of
// milliseconds from one run to the next, and MySQL's is about twice
// PostgreSQL's with no fault at all (a claim there is half a dozen
// statements, on PostgreSQL two), so a bound on the ratio would fail for
// reasons that have nothing to do with recovery. A relay that left lost
// claims to the rescuer fails the checks above.
func TestConnectionResetsEvery1500msOnEachDatabase(t *testing.T) {
	testenv.Long(t)
	const cycles = 10
	p99 := map[string]time.Duration{}
	for _, c := range []struct {
		name  string
		world func(*testing.T) *world
	}{{"PostgreSQL", newWorld}, {"MySQL", newMySQLWorld}} {
		t.Run(c.name, func(t *testing.T) {
			w := c.world(t)
			px := testenv.NewProxy(t, w.db.addr(t))
			r := w.startRelay(t, "fault-resets", via{pg: px.Addr()})
			stop := w.startLoad(t, load{writers: 4, keys: 100, perTx: 3, pace: 5 * time.Millisecond})
			tick := time.NewTicker(resetEvery)
			for range cycles {
				<-tick.C
				px.Reset()
				px.Heal()
			}
			tick.Stop()
			stop()
			w.verify(t, observedBound(r), logsOf(r))
			lat := w.commitToBroker(t)
			require.NotEmpty(t, lat)
			stats := r.relay.Stats()
			p99[c.name] = quantile(lat, 0.99)
			t.Logf("%s: %d events; commit to broker p50 %v, p90 %v, p99 %v, max %v; %d connections accepted by the proxy; relay %+v",
				c.name, len(lat), quantile(lat, 0.5), quantile(lat, 0.9), p99[c.name], lat[len(lat)-1], px.Accepted(), stats)
			// A lost claim is released by its token as soon as the
			// database answers: none of its rows waits for the lease. What
			// the rescuer may take back is only the rows of batches whose
			// acknowledgement itself could not be written within the lease
			// (a database too slow to commit between two resets): each of
			// those the late acknowledgement finds gone, or the relay gave
			// its batch up in its log.
			late := r.obs.leaseLost.Load() + abandonedRows(r.String())
			require.LessOrEqualf(t, stats.Rescued, late, "%s: the relay rescued %d rows from expired leases, more than the %d rows of "+
				"acknowledgements that came too late: lost claims waited for their lease; its log:\n%s",
				c.name, stats.Rescued, late, r)
			require.Lessf(t, lat[len(lat)-1], 2*lease, "%s: an event waited %v from commit to broker; the relay's log:\n%s",
				c.name, lat[len(lat)-1], r)
		})
	}
	if pg, my := p99["PostgreSQL"], p99["MySQL"]; pg > 0 && my > 0 {
		t.Logf("p99 commit to broker under resets every %v: PostgreSQL %v, MySQL %v (%.2fx)", resetEvery, pg, my, float64(my)/float64(pg))
	}
}

// abandonedRowsRE finds the relay's log lines about a batch it left to the
// rescuer, acknowledged past its lease.
var abandonedRowsRE = regexp.MustCompile(`msg="(?:lease expired before acknowledging; leaving the batch to the rescuer|acknowledging batch failed; the rows will be rescued when their lease expires)".* rows=(\d+)`)

// abandonedRows counts the rows of the batches a relay's log says it left
// to the rescuer.
func abandonedRows(log string) int64 {
	var n int64
	for _, m := range abandonedRowsRE.FindAllStringSubmatch(log, -1) {
		v, _ := strconv.ParseInt(m[1], 10, 64)
		n += v
	}
	return n
}
