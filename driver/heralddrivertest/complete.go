package heralddrivertest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// completeCases check acknowledgements: the decided outcomes are written,
// and only by the claim that still holds the rows.
var completeCases = []testCase{
	{"CompletePublishesAndRetries", func(t *testing.T, o *Kit) {
		const delay = 500 * time.Millisecond
		ids := o.Write(msg("t"), msg("t"), msg("t"))
		pub, failed, outage := ids[0], ids[1], ids[2]
		token, envs := o.Claim(3, time.Minute)
		require.Len(t, envs, 3)

		res, err := o.d.Store.Complete(o.ctx(), herald.CompleteParams{Token: token})
		require.NoError(t, err)
		require.Zero(t, res.Published+len(res.Failed), "an empty acknowledgement changes nothing")

		// The database's clock when the rows were claimed: the lease ends
		// a minute after it.
		lease := o.Get(failed).LeaseUntil
		require.NotNil(t, lease)
		claimedAt := lease.Add(-time.Minute)
		completing := time.Now()
		res = o.Complete(herald.CompleteParams{Token: token, Published: []string{pub}, Failed: []herald.Failure{
			{ID: failed, Outcome: herald.OutcomeRetry, Error: "broker said no", Delay: delay},
			{ID: outage, Outcome: herald.OutcomeOutage, Error: "connection refused", Delay: delay},
		}})
		require.Equal(t, 1, res.Published)
		require.ElementsMatch(t, []string{failed, outage}, res.Failed)
		res = o.Complete(herald.CompleteParams{Token: token, Published: []string{pub, failed},
			Failed: []herald.Failure{{ID: outage, Outcome: herald.OutcomeDead, Error: "again"}}})
		require.Zero(t, res.Published+len(res.Failed), "acknowledging twice changes nothing: %+v", res)
		completedBy := o.databaseNow()

		ev := o.Get(pub)
		require.Equal(t, heraldadmin.StatePublished, ev.State)
		require.NotNil(t, ev.PublishedAt)
		require.False(t, ev.PublishedAt.Before(claimedAt) || ev.PublishedAt.After(completedBy),
			"published_at %v outside [%v, %v]", ev.PublishedAt, claimedAt, completedBy)
		require.Nil(t, ev.LeaseUntil)
		require.Equal(t, 1, ev.Attempt)
		require.Empty(t, ev.LastError)

		for _, f := range []struct {
			id, lastError string
			attempt       int
		}{
			{failed, "broker said no", 1},
			{outage, "connection refused", 0}, // an outage refunds the attempt
		} {
			ev := o.Get(f.id)
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Equal(t, f.attempt, ev.Attempt)
			require.Equal(t, f.lastError, ev.LastError, "the failure is kept")
			require.Nil(t, ev.LeaseUntil)
			// available_at = the database's now at Complete + delay; a
			// millisecond of slack for clocks of millisecond resolution.
			lo, hi := claimedAt.Add(delay-time.Millisecond), completedBy.Add(delay+time.Millisecond)
			require.False(t, ev.AvailableAt.Before(lo) || ev.AvailableAt.After(hi),
				"available_at %v outside [%v, %v]", ev.AvailableAt, lo, hi)
		}

		_, early := o.Claim(10, time.Minute)
		if time.Since(completing) < delay {
			require.Empty(t, early, "claimable before the retry delay ended")
		}
		got := map[string]herald.Envelope{}
		for _, e := range early {
			got[e.ID] = e
		}
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			envs, err := o.tryClaim(uuid.NewString(), 10, time.Minute)
			require.NoError(c, err)
			for _, e := range envs {
				got[e.ID] = e
			}
			require.Len(c, got, 2)
		}, waitFor, 20*time.Millisecond, "claimable once the delay ended")
		require.Equal(t, 2, got[failed].Attempt, "a failed attempt counts")
		require.Equal(t, 1, got[outage].Attempt, "an outage does not")
	}},

	{"PermanentFailureIsDead", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"), msg("t"))
		token, _ := o.Claim(2, time.Minute)
		res := o.Complete(herald.CompleteParams{Token: token, Published: ids[1:],
			Failed: []herald.Failure{{ID: ids[0], Outcome: herald.OutcomeDead, Error: "message too large"}}})
		require.Equal(t, ids[:1], res.Failed)
		require.Equal(t, 1, res.Published)

		ev := o.Get(ids[0])
		require.Equal(t, heraldadmin.StateDead, ev.State)
		require.NotNil(t, ev.DeadAt)
		require.Nil(t, ev.LeaseUntil)
		require.Equal(t, 1, ev.Attempt, "on its first attempt, far from MaxAttempts")
		require.Equal(t, "message too large", ev.LastError)
		require.Equal(t, ids[:1], rowIDs(o.list(heraldadmin.EventFilter{All: true})))
		_, envs := o.Claim(10, time.Minute)
		require.Empty(t, envs, "dead rows are not claimed")
	}},

	{"OutcomesAreWrittenAsDecided", func(t *testing.T, o *Kit) {
		// The relay decides each outcome (see herald's decide); the store
		// writes it: state, attempt refund, last_error, parking.
		outcomes := []herald.Outcome{herald.OutcomeRetry, herald.OutcomeOutage, herald.OutcomeHeldBack,
			herald.OutcomeReleased, herald.OutcomeDead, herald.OutcomeParked}
		msgs := make([]herald.Message, len(outcomes))
		for i := range msgs {
			msgs[i] = msg("t")
			msgs[i].Key = fmt.Sprintf("k%d", i)
		}
		ids := o.Write(msgs...)
		token, envs := o.Claim(len(ids), time.Minute)
		require.Len(t, envs, len(ids))
		failed := make([]herald.Failure, len(ids))
		for i, out := range outcomes {
			failed[i] = herald.Failure{ID: ids[i], Outcome: out, Error: "said " + string(out)}
		}
		require.ElementsMatch(t, ids, o.Complete(herald.CompleteParams{Token: token, Failed: failed}).Failed)
		for i, want := range []struct {
			state     heraldadmin.State
			attempt   int
			lastError string
			parked    bool
		}{
			{heraldadmin.StateReady, 1, "said retry", false},
			{heraldadmin.StateReady, 0, "said outage", false}, // refunded
			{heraldadmin.StateReady, 0, "", false},            // held back: refunded, its last error kept
			{heraldadmin.StateReady, 0, "", false},            // released: likewise
			{heraldadmin.StateDead, 1, "said dead", false},
			{heraldadmin.StateDead, 1, "said parked", true},
		} {
			ev := o.Get(ids[i])
			require.Equal(t, want.state, ev.State, outcomes[i])
			require.Equal(t, want.attempt, ev.Attempt, outcomes[i])
			require.Equal(t, want.lastError, ev.LastError, outcomes[i])
			require.Equal(t, want.parked, ev.Parked, outcomes[i])
			require.Nil(t, ev.LeaseUntil, outcomes[i])
			require.Equal(t, want.state == heraldadmin.StateDead, ev.DeadAt != nil, outcomes[i])
		}
	}},

	{"TokenCheckedAckAfterLeaseLossChangesNothing", func(t *testing.T, o *Kit) {
		all := o.Write(msg("t"), msg("t"), msg("t"))
		ids, done := all[:2], all[2]
		tokenA := uuid.NewString()
		require.Len(t, o.claimWith(tokenA, 10, 100*time.Millisecond), 3)
		rescued := 0
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := o.d.Store.RescueExpired(o.ctx(), 10)
			require.NoError(c, err)
			rescued += n
			require.Equal(c, 3, rescued)
		}, waitFor, 20*time.Millisecond)
		// Another relay claims the rows and publishes one of them. A, back
		// from a pause, acknowledges.
		tokenB := uuid.NewString()
		envs, err := o.d.Store.Claim(o.ctx(), herald.ClaimParams{Token: tokenB, Owner: "relay-b", Limit: 10, Lease: time.Hour})
		require.NoError(t, err)
		require.ElementsMatch(t, all, envIDs(envs))
		require.Equal(t, 1, o.Complete(herald.CompleteParams{Token: tokenB, Published: []string{done}}).Published)
		publishedAt := o.Get(done).PublishedAt

		res := o.Complete(herald.CompleteParams{Token: tokenA, Published: ids[:1],
			Failed: []herald.Failure{{ID: ids[1], Outcome: herald.OutcomeParked, Error: "late from A"},
				{ID: done, Outcome: herald.OutcomeDead, Error: "late from A"}}})
		require.Equal(t, herald.CompleteResult{}, res)
		res = o.Complete(herald.CompleteParams{Token: tokenA, Published: all})
		require.Zero(t, res.Published)
		res = o.Complete(herald.CompleteParams{Token: tokenA, Failed: []herald.Failure{{ID: ids[0], Outcome: herald.OutcomeRetry, Error: "late from A"}}})
		require.Empty(t, res.Failed)
		res = o.Complete(herald.CompleteParams{Token: tokenA, Failed: released(all...)})
		require.Empty(t, res.Failed)

		ev := o.Get(done)
		require.Equal(t, heraldadmin.StatePublished, ev.State, "what B published stays published")
		require.NotNil(t, ev.PublishedAt)
		require.True(t, publishedAt.Equal(*ev.PublishedAt), "published_at %v, then %v", publishedAt, ev.PublishedAt)
		require.NotEqual(t, "late from A", ev.LastError)
		require.Nil(t, ev.DeadAt)
		for _, id := range ids {
			ev := o.Get(id)
			require.Equal(t, heraldadmin.StateClaimed, ev.State, "still B's")
			require.Equal(t, "relay-b", ev.ClaimedBy)
			require.Equal(t, 2, ev.Attempt)
			require.NotEqual(t, "late from A", ev.LastError)
			require.Nil(t, ev.DeadAt)
		}
		require.Zero(t, o.rescue(10), "B's lease runs")
		res = o.Complete(herald.CompleteParams{Token: tokenB, Published: ids})
		require.Equal(t, 2, res.Published, "the owner's acknowledgement still works")
	}},

	{"ReleasedRowsReturnAtOnceWithAttemptRefunded", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"), msg("t"), msg("t"))
		token, envs := o.Claim(3, time.Hour)
		require.Len(t, envs, 3)

		res := o.Complete(herald.CompleteParams{Token: token, Failed: released(ids[:2]...)})
		require.ElementsMatch(t, ids[:2], res.Failed)
		for _, id := range ids[:2] {
			ev := o.Get(id)
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Zero(t, ev.Attempt, "the released claim does not count")
			require.Nil(t, ev.LeaseUntil)
		}
		ev := o.Get(ids[2])
		require.Equal(t, heraldadmin.StateClaimed, ev.State, "rows not named stay claimed")
		require.Equal(t, 1, ev.Attempt)

		for _, tc := range []struct {
			token string
			ids   []string
		}{
			{uuid.NewString(), ids[2:]}, // another token
			{token, ids[:2]},            // released already
			{token, nil},                // nothing
		} {
			res := o.Complete(herald.CompleteParams{Token: tc.token, Failed: released(tc.ids...)})
			require.Empty(t, res.Failed)
		}
		_, again := o.Claim(10, time.Minute)
		require.Equal(t, ids[:2], envIDs(again), "claimable at once")
		for _, e := range again {
			require.Equal(t, 1, e.Attempt)
		}
	}},

	{"CompleteChangesOnlyTheRowsItsTokenHolds", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"), msg("t"), msg("t"))
		mine, theirs := uuid.NewString(), uuid.NewString()
		require.Len(t, o.claimWith(mine, 1, time.Hour), 1)
		require.Len(t, o.claimWith(theirs, 1, time.Hour), 1)
		// One acknowledgement names a row of its own, one another claim
		// holds, and one nobody holds.
		res := o.Complete(herald.CompleteParams{Token: mine, Published: ids[:2],
			Failed: []herald.Failure{{ID: ids[2], Outcome: herald.OutcomeDead, Error: "not mine"}}})
		require.Equal(t, 1, res.Published)
		require.Empty(t, res.Failed)
		res = o.Complete(herald.CompleteParams{Token: mine,
			Failed: []herald.Failure{{ID: ids[1], Outcome: herald.OutcomeDead, Error: "not mine"}}})
		require.Empty(t, res.Failed)
		require.Equal(t, heraldadmin.StatePublished, o.Get(ids[0]).State)
		ev := o.Get(ids[1])
		require.Equal(t, heraldadmin.StateClaimed, ev.State, "still the other claim's")
		require.Empty(t, ev.LastError)
		ev = o.Get(ids[2])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Empty(t, ev.LastError)
		require.Equal(t, 1, o.Complete(herald.CompleteParams{Token: theirs, Published: ids[1:2]}).Published)
	}},

	{"DeletingAcknowledgementLeavesNoRowAndIsFenced", func(t *testing.T, o *Kit) {
		// CompleteParams.Delete: the confirmed rows go; failures are
		// written as without it, in the same call. Both forms of the
		// acknowledgement (every event confirmed, and some failed) change
		// only the rows the token holds.
		ids := o.Write(msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))
		token, envs := o.Claim(10, time.Hour)
		require.Len(t, envs, 5)
		stale := uuid.NewString()
		res := o.Complete(herald.CompleteParams{Token: stale, Delete: true, Published: ids})
		require.Zero(t, res.Published, "another token deletes nothing")
		res = o.Complete(herald.CompleteParams{Token: stale, Delete: true, Published: ids[:1],
			Failed: []herald.Failure{{ID: ids[1], Outcome: herald.OutcomeDead, Error: "not mine"}}})
		require.Equal(t, herald.CompleteResult{}, res, "another token deletes and fails nothing")

		res = o.Complete(herald.CompleteParams{Token: token, Delete: true, Published: ids[:1]})
		require.Equal(t, 1, res.Published)
		res = o.Complete(herald.CompleteParams{Token: token, Delete: true, Published: ids[1:3], Failed: []herald.Failure{
			{ID: ids[3], Outcome: herald.OutcomeRetry, Error: "broker said no", Delay: time.Hour},
			{ID: ids[4], Outcome: herald.OutcomeParked, Error: "poison"},
		}})
		require.Equal(t, 2, res.Published)
		require.ElementsMatch(t, ids[3:], res.Failed)
		for _, id := range ids[:3] {
			o.requireGone(id)
		}
		ev := o.Get(ids[3])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Equal(t, "broker said no", ev.LastError)
		require.Equal(t, 1, ev.Attempt)
		ev = o.Get(ids[4])
		require.Equal(t, heraldadmin.StateDead, ev.State)
		require.Equal(t, "poison", ev.LastError)

		res = o.Complete(herald.CompleteParams{Token: token, Delete: true, Published: ids,
			Failed: []herald.Failure{{ID: ids[3], Outcome: herald.OutcomeDead, Error: "again"}}})
		require.Equal(t, herald.CompleteResult{}, res, "acknowledging twice changes nothing")
		require.Equal(t, map[string]int64{"t/ready": 1, "t/dead": 1}, o.Counts(), "nothing is kept as published")
	}},
}
