package heralddrivertest

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// rescueCases check the rescuer: expired leases only, within its limit.
var rescueCases = []testCase{
	{"RescuerReturnsExpiredLeasesOnly", func(t *testing.T, o *Kit) {
		long := o.put(heraldadmin.StateClaimed, msg("long"))
		short := o.Write(msg("short"))
		lost := uuid.NewString()
		require.Len(t, o.claimWith(lost, 1, 50*time.Millisecond), 1)
		rescued := 0
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := o.d.Store.RescueExpired(o.ctx(), 10)
			require.NoError(c, err)
			rescued += n
			require.NotZero(c, rescued)
		}, waitFor, 20*time.Millisecond)
		require.Equal(t, 1, rescued, "the expired lease only")
		require.Zero(t, o.rescue(10))

		ev := o.Get(long[0])
		require.Equal(t, heraldadmin.StateClaimed, ev.State, "a running lease is not rescued")
		require.NotNil(t, ev.LeaseUntil)
		ev = o.Get(short[0])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Nil(t, ev.LeaseUntil)
		require.Equal(t, 1, ev.Attempt, "the lost attempt counts")
		require.Equal(t, "lease expired: relay "+o.owner+" did not acknowledge in time", ev.LastError,
			"operators see which relay lost it")
		// The relay that lost the lease acknowledges late: nothing changes.
		res := o.Complete(herald.CompleteParams{Token: lost, Published: short})
		require.Zero(t, res.Published)
		res = o.Complete(herald.CompleteParams{Token: lost, Failed: []herald.Failure{{ID: short[0], Outcome: herald.OutcomeDead, Error: "late"}}})
		require.Empty(t, res.Failed)
		require.Equal(t, heraldadmin.StateReady, o.Get(short[0]).State)
		_, envs := o.Claim(10, time.Minute)
		require.Equal(t, short, envIDs(envs), "claimable at once")
		// The relay that lost the lease may have published before it died:
		// the attempt counted, so a message that kills every relay trying it
		// still runs out of attempts.
		require.Equal(t, 2, envs[0].Attempt)
	}},

	{"RescueExpiredHonoursItsLimit", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))
		require.Len(t, o.claimWith(uuid.NewString(), 5, 50*time.Millisecond), 5)
		// The five leases end together (one claim, one clock reading): the
		// first rescue that finds them may take only as many as its limit.
		var first int
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := o.d.Store.RescueExpired(o.ctx(), 2)
			require.NoError(c, err)
			first = n
			require.NotZero(c, n)
		}, waitFor, 20*time.Millisecond)
		require.Equal(t, 2, first, "RescueExpired(limit 2) with 5 expired leases")
		require.Equal(t, 2, o.rescue(2))
		require.Equal(t, 1, o.rescue(2))
		require.Zero(t, o.rescue(2))
		require.Equal(t, map[string]int64{"t/ready": int64(len(ids))}, o.Counts())
	}},
}
