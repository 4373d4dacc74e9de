package heralddrivertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// backlogCases check Admin.Backlog, the cheap summary metrics read.
var backlogCases = []testCase{
	{"BacklogCountsWaitingAndDeadRowsPerTopic", func(t *testing.T, o *Kit) {
		require.Empty(t, o.backlog(), "an empty table has no backlog")
		o.put(heraldadmin.StatePublished, msg("a"), msg("a"))
		o.put(heraldadmin.StateClaimed, msg("a"))
		parking := keyed("b", "k")
		ids := o.Write(parking, keyed("b", "k"), keyed("b", "other"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 10})
		o.Complete(herald.CompleteParams{Token: token, Published: ids[2:], Failed: []herald.Failure{
			{ID: ids[0], Outcome: herald.OutcomeParked, Error: "poison"},
			{ID: ids[1], Outcome: herald.OutcomeHeldBack, Error: "held"},
		}})
		o.put(heraldadmin.StateDead, msg("c"))
		o.backdate(time.Hour, ids[1])
		o.Write(msg("a"))

		got := o.backlog()
		require.Len(t, got, 3, "published rows are not part of the backlog: %+v", got)
		require.Equal(t, "a", got[0].Topic)
		require.EqualValues(t, []int64{1, 1, 0, 0}, []int64{got[0].Ready, got[0].Claimed, got[0].Dead, got[0].ParkedKeys})
		require.Less(t, got[0].OldestPending, clockSkew)
		require.Equal(t, "b", got[1].Topic)
		require.EqualValues(t, []int64{1, 0, 1, 1}, []int64{got[1].Ready, got[1].Claimed, got[1].Dead, got[1].ParkedKeys})
		require.InDelta(t, time.Hour.Seconds(), got[1].OldestPending.Seconds(), clockSkew.Seconds(),
			"the backdated waiting row is the oldest pending")
		require.Equal(t, heraldadmin.TopicBacklog{Topic: "c", Dead: 1}, got[2], "dead rows count, but are not pending")
	}},
}

func (o *Kit) backlog() []heraldadmin.TopicBacklog {
	o.t.Helper()
	b, err := o.d.Admin.Backlog(o.ctx())
	require.NoError(o.t, err)
	return b
}
