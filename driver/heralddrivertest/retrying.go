package heralddrivertest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// retryingCases check what the admin page reads of the events waiting for
// their next attempt (heraldadmin.Retrying): which events count, their
// groups by last error, and trying them now without reordering a key.
var retryingCases = []testCase{
	{"RetryingGroupsListAndRetryNowSelectOnlyEventsWaitingAfterAFailure", func(t *testing.T, o *Kit) {
		rt, ok := o.d.Admin.(heraldadmin.Retrying)
		require.True(t, ok, "the driver's Admin implements heraldadmin.Retrying")

		// Not retrying: published, dead, scheduled for later without a
		// failure.
		o.put(heraldadmin.StatePublished, msg("orders"))
		o.put(heraldadmin.StateDead, msg("orders"))
		later := msg("payments")
		later.AvailableAt = time.Now().Add(time.Hour)
		scheduled := o.Write(later)[0]

		// Retrying: two failures of one error on two topics, one of
		// another, and one that waits out an outage (its attempt
		// refunded).
		refused := o.Write(keyed("orders", "k1"), msg("billing"))
		other := o.Write(msg("orders"))[0]
		outage := o.Write(msg("webhooks"))[0]
		token, envs := o.Claim(10, time.Minute)
		require.ElementsMatch(t, append(refused, other, outage), envIDs(envs))
		fail := func(id string, out herald.Outcome, msg string) herald.Failure {
			return herald.Failure{ID: id, Outcome: out, Error: msg, Delay: time.Hour}
		}
		o.Complete(herald.CompleteParams{Token: token, Failed: []herald.Failure{
			fail(refused[0], herald.OutcomeRetry, "dial tcp: connection refused"),
			fail(refused[1], herald.OutcomeRetry, "dial tcp: connection refused"),
			fail(other, herald.OutcomeRetry, "HTTP 500"),
			fail(outage, herald.OutcomeOutage, "destination down"),
		}})
		// k1's next event waits behind its first.
		behind := o.Write(keyed("orders", "k1"))[0]
		_, envs = o.Claim(10, time.Minute)
		require.Empty(t, envs, "nothing is available: k1's next event waits behind its first")

		groups, err := rt.RetryGroups(o.ctx(), 10)
		require.NoError(t, err)
		require.Len(t, groups, 3)
		g := groups[0]
		require.Equal(t, "dial tcp: connection refused", g.LastError, "the largest group first")
		require.Equal(t, int64(2), g.Count)
		require.Equal(t, int64(2), g.Topics)
		require.Equal(t, 1, g.MaxAttempts)
		between(t, time.Until(g.NextAttempt), 50*time.Minute, 70*time.Minute, "the group's next attempt")
		require.False(t, g.Oldest.IsZero())
		require.Equal(t, []string{"HTTP 500", "destination down"}, []string{groups[1].LastError, groups[2].LastError})
		require.Equal(t, int64(1), groups[2].Count, "an event waiting out an outage is retrying though its attempt was refunded")
		limited, err := rt.RetryGroups(o.ctx(), 1)
		require.NoError(t, err)
		require.Len(t, limited, 1)
		_, err = rt.RetryGroups(o.ctx(), 0)
		require.Error(t, err)

		list := func(f heraldadmin.RetryFilter) []string {
			t.Helper()
			rows, err := rt.ListRetrying(o.ctx(), f)
			require.NoError(t, err)
			for _, r := range rows {
				require.Equal(t, heraldadmin.StateReady, r.State)
				require.NotEmpty(t, r.LastError)
			}
			return rowIDs(rows)
		}
		require.ElementsMatch(t, append(refused, other, outage), list(heraldadmin.RetryFilter{}))
		require.NotContains(t, list(heraldadmin.RetryFilter{}), scheduled)
		require.ElementsMatch(t, refused, list(heraldadmin.RetryFilter{LastError: "dial tcp: connection refused"}))
		require.Equal(t, []string{refused[1]}, list(heraldadmin.RetryFilter{LastError: "dial tcp: connection refused", Topic: "billing"}))
		require.Equal(t, []string{other}, list(heraldadmin.RetryFilter{IDs: []string{other, scheduled}}))
		require.Len(t, list(heraldadmin.RetryFilter{Limit: 2}), 2)
		_, err = rt.ListRetrying(o.ctx(), heraldadmin.RetryFilter{IDs: []string{"not-a-uuid"}})
		require.Error(t, err)

		// Retry now: the zero filter is refused; a group is made available
		// now, nothing else.
		_, err = rt.RetryNow(o.ctx(), heraldadmin.RetryFilter{})
		require.Error(t, err, "retrying everything needs All")
		n, err := rt.RetryNow(o.ctx(), heraldadmin.RetryFilter{IDs: []string{scheduled}})
		require.NoError(t, err)
		require.Zero(t, n, "an event scheduled for later without a failure is not retrying")
		n, err = rt.RetryNow(o.ctx(), heraldadmin.RetryFilter{LastError: "dial tcp: connection refused"})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		require.Equal(t, heraldadmin.StateReady, o.Get(refused[0]).State)
		require.Equal(t, 1, o.Get(refused[0]).Attempt, "retrying now spends no attempt and refunds none")

		// The key's order holds: its first event comes, then the one that
		// waited behind it (claims keep write order).
		token, envs = o.Claim(10, time.Minute)
		require.ElementsMatch(t, append(refused, behind), envIDs(envs))
		require.Less(t, slices.Index(envIDs(envs), refused[0]), slices.Index(envIDs(envs), behind), "in the key's order")
		o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})

		n, err = rt.RetryNow(o.ctx(), heraldadmin.RetryFilter{All: true})
		require.NoError(t, err)
		require.Equal(t, 2, n, "the other error's event and the outage's")
		n, err = rt.RetryNow(o.ctx(), heraldadmin.RetryFilter{All: true})
		require.NoError(t, err)
		require.Zero(t, n, "events available now are not made available again")
	}},
}
