package heralddrivertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
)

// retentionCases check what retention deletes.
var retentionCases = []testCase{
	{"RetentionRemovesOnlyOldPublished", func(t *testing.T, o *Kit) {
		old := o.put(heraldadmin.StatePublished, msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))
		recent := o.put(heraldadmin.StatePublished, msg("t"))
		dead := o.put(heraldadmin.StateDead, msg("t"))
		// Written long ago but published just now: retention counts from
		// publication.
		lateID := o.Write(msg("t"))
		o.backdate(48*time.Hour, lateID...)
		o.settle(heraldadmin.StatePublished, lateID)
		ready := o.Write(msg("t"))
		o.backdate(48*time.Hour, old...)
		o.backdate(48*time.Hour, dead[0], ready[0])

		for _, want := range []int{2, 2, 1, 0} {
			n, err := o.d.Store.DeletePublished(o.ctx(), 24*time.Hour, 2)
			require.NoError(t, err)
			require.Equal(t, want, n, "limit 2 per call, 5 to delete")
		}
		for _, id := range old {
			o.requireGone(id)
		}
		for _, id := range []string{recent[0], lateID[0], dead[0], ready[0]} {
			o.Get(id)
		}
		require.Equal(t, map[string]int64{"t/published": 2, "t/dead": 1, "t/ready": 1}, o.Counts())
	}},
}
