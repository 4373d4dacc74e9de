package heralddrivertest

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// adminCases check what operators read and do, and that migrating again is
// harmless.
var adminCases = []testCase{
	{"RequeueAndDiscardByIDTopicAndAll", func(t *testing.T, o *Kit) {
		// Its retry time long past: requeueing makes it ready from now.
		overdue := msg("a")
		overdue.AvailableAt = time.Now().Add(-time.Hour)
		a := o.put(heraldadmin.StateDead, overdue, msg("a"), msg("a"))
		b := o.put(heraldadmin.StateDead, msg("b"), msg("b"))
		c := o.put(heraldadmin.StateDead, msg("c"), msg("c"))
		o.put(heraldadmin.StatePublished, msg("a"))
		readyA := o.Write(msg("a"))

		require.Equal(t, slices.Concat(a, b, c), rowIDs(o.list(heraldadmin.EventFilter{All: true})), "dead rows by default, in write order")
		require.Equal(t, a[:2], rowIDs(o.list(heraldadmin.EventFilter{All: true, Limit: 2})))
		require.Equal(t, a, rowIDs(o.list(heraldadmin.EventFilter{Topic: "a"})))
		require.Equal(t, []string{a[0], b[1]}, rowIDs(o.list(heraldadmin.EventFilter{IDs: []string{b[1], readyA[0], a[0]}})))
		require.Equal(t, readyA, rowIDs(o.list(heraldadmin.EventFilter{Topic: "a", State: heraldadmin.StateReady})))
		for _, ev := range o.list(heraldadmin.EventFilter{All: true}) {
			require.Equal(t, heraldadmin.StateDead, ev.State)
			require.Equal(t, "made dead by the suite", ev.LastError, "the listing carries the reason")
			require.NotNil(t, ev.DeadAt)
		}

		requeue := func(f heraldadmin.EventFilter) int {
			t.Helper()
			n, err := o.d.Admin.RequeueDead(o.ctx(), f)
			require.NoError(t, err)
			return n
		}
		discard := func(f heraldadmin.EventFilter) int {
			t.Helper()
			n, err := o.d.Admin.DiscardDead(o.ctx(), f)
			require.NoError(t, err)
			return n
		}
		require.Equal(t, 1, requeue(heraldadmin.EventFilter{IDs: []string{a[0], readyA[0]}}), "only dead rows are requeued")
		ev := o.Get(a[0])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Zero(t, ev.Attempt, "requeue resets the attempts")
		require.Nil(t, ev.DeadAt)
		require.WithinDuration(t, time.Now(), ev.AvailableAt, clockSkew, "ready from now, not from its old time")
		require.Zero(t, requeue(heraldadmin.EventFilter{IDs: a[:1]}), "no longer dead")
		require.Equal(t, 2, requeue(heraldadmin.EventFilter{Topic: "b"}))
		require.Equal(t, 2, discard(heraldadmin.EventFilter{Topic: "a"}), "the dead ones only")
		require.Equal(t, 1, discard(heraldadmin.EventFilter{IDs: []string{c[0], readyA[0]}}), "the dead ones only")
		o.requireGone(c[0])
		require.Equal(t, 1, discard(heraldadmin.EventFilter{All: true}))
		require.Zero(t, requeue(heraldadmin.EventFilter{All: true}))
		o.requireGone(a[1])
		o.requireGone(a[2])
		o.requireGone(c[1])

		counts := map[string]int64{"a/ready": 2, "a/published": 1, "b/ready": 2}
		require.Equal(t, counts, o.Counts())
		_, envs := o.Claim(10, time.Minute)
		require.ElementsMatch(t, []string{a[0], b[0], b[1], readyA[0]}, envIDs(envs))
		for _, e := range envs {
			require.Equal(t, 1, e.Attempt)
		}

		// Refusals. Each filter is exactly one of IDs, Topic, All, and ids
		// are UUIDs: anything else is an error and changes nothing.
		d := o.put(heraldadmin.StateDead, msg("d"))
		counts = o.Counts()
		for _, f := range []heraldadmin.EventFilter{
			{},
			{State: heraldadmin.StateDead},
			{IDs: d, Topic: "d"},
			{Topic: "d", All: true},
			{IDs: d, All: true},
			{IDs: []string{"not-a-uuid"}},
			{IDs: []string{d[0], "not-a-uuid"}},
		} {
			_, err := o.d.Admin.RequeueDead(o.ctx(), f)
			require.Error(t, err, "RequeueDead(%+v)", f)
			_, err = o.d.Admin.DiscardDead(o.ctx(), f)
			require.Error(t, err, "DiscardDead(%+v)", f)
			_, err = o.d.Admin.ListEvents(o.ctx(), f)
			require.Error(t, err, "ListEvents(%+v)", f)
		}
		_, err := o.d.Admin.ListEvents(o.ctx(), heraldadmin.EventFilter{All: true, State: "gone"})
		require.Error(t, err, "an unknown state")
		_, err = o.d.Admin.GetEvent(o.ctx(), "not-a-uuid")
		require.ErrorContains(t, err, "not an event id")
		require.NotErrorIs(t, err, heraldadmin.ErrNotFound)
		o.requireGone(herald.NewID())
		require.Equal(t, counts, o.Counts())
	}},

	{"StatusCountsByTopicAndState", func(t *testing.T, o *Kit) {
		st, err := o.d.Admin.Status(o.ctx())
		require.NoError(t, err)
		require.Empty(t, st.Topics, "an empty outbox")
		require.Zero(t, st.OldestPending)

		o.put(heraldadmin.StateDead, msg("orders"))
		o.put(heraldadmin.StatePublished, msg("orders"), msg("orders"))
		held := o.put(heraldadmin.StateClaimed, msg("orders"))
		ready := o.Write(msg("orders"), msg("orders"), msg("orders"), msg("payments"), msg("payments"))
		o.backdate(30*time.Minute, held...)
		o.backdate(time.Hour, ready[1])

		st, err = o.d.Admin.Status(o.ctx())
		require.NoError(t, err)
		require.True(t, slices.IsSortedFunc(st.Topics, func(a, b heraldadmin.TopicStatus) int {
			return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.State, b.State))
		}), "by topic, then state, as operators read them: %+v", st.Topics)
		oldest := map[string]time.Duration{}
		counts := map[string]int64{}
		for _, ts := range st.Topics {
			k := ts.Topic + "/" + string(ts.State)
			_, dup := counts[k]
			require.False(t, dup, "%s listed twice", k)
			counts[k], oldest[k] = ts.Count, ts.Oldest
		}
		require.Equal(t, map[string]int64{
			"orders/dead": 1, "orders/published": 2, "orders/claimed": 1, "orders/ready": 3, "payments/ready": 2,
		}, counts)
		between(t, oldest["orders/ready"], time.Hour, time.Hour+clockSkew, "orders/ready")
		between(t, oldest["orders/claimed"], 30*time.Minute, 30*time.Minute+clockSkew, "orders/claimed")
		between(t, oldest["payments/ready"], 0, clockSkew, "payments/ready")
	}},

	{"OldestPendingCountsReadyAndClaimedRowsOnly", func(t *testing.T, o *Kit) {
		dead := o.put(heraldadmin.StateDead, msg("t"))
		published := o.put(heraldadmin.StatePublished, msg("t"))
		held := o.put(heraldadmin.StateClaimed, msg("t"))
		ready := o.Write(msg("t"))
		o.backdate(5*time.Hour, dead...)
		o.backdate(10*time.Hour, published...)
		o.backdate(2*time.Hour, held...)
		o.backdate(20*time.Minute, ready...)
		between(t, o.status().OldestPending, 2*time.Hour, 2*time.Hour+clockSkew,
			"the claimed row is the oldest pending; dead and published rows are not pending")
		o.backdate(3*time.Hour, ready...)
		between(t, o.status().OldestPending, 3*time.Hour+20*time.Minute, 3*time.Hour+20*time.Minute+clockSkew,
			"now the ready row is")
	}},

	{"MigrateAgainKeepsEverything", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"), msg("t"))
		for range 2 {
			require.NoError(t, o.d.Store.Migrate(o.ctx()))
		}
		require.NoError(t, o.d.Store.Ping(o.ctx()))
		require.Equal(t, ids, rowIDs(o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})))
	}},
}
