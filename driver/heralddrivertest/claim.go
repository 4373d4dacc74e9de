package heralddrivertest

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// claimCases check which rows a claim takes, and that no two claimers share
// one. Ordered claims have cases of their own in ordering.go.
var claimCases = []testCase{
	{"ReleaseClaimReturnsOnlyThatClaimsRows", func(t *testing.T, o *Kit) {
		// A relay whose claim answer was lost releases by the token it
		// chose; another claim's rows stay where they are.
		ids := o.Write(msg("t"), msg("t"), msg("t"))
		lost := uuid.NewString()
		require.Len(t, o.claimWith(lost, 2, time.Hour), 2)
		other, envs := o.Claim(10, time.Hour)
		require.Len(t, envs, 1)

		n, err := o.d.Store.ReleaseClaim(o.ctx(), lost)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for _, id := range ids[:2] {
			ev := o.Get(id)
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Zero(t, ev.Attempt, "a claim never published refunds its attempt")
			require.Nil(t, ev.LeaseUntil)
		}
		require.Equal(t, heraldadmin.StateClaimed, o.Get(ids[2]).State, "another claim's row is untouched")

		for _, token := range []string{lost, uuid.NewString()} {
			n, err := o.d.Store.ReleaseClaim(o.ctx(), token)
			require.NoError(t, err)
			require.Zero(t, n, "nothing left to release")
		}
		require.Equal(t, 1, o.Complete(herald.CompleteParams{Token: other, Published: ids[2:]}).Published)
		_, again := o.Claim(10, time.Minute)
		require.ElementsMatch(t, ids[:2], envIDs(again), "released rows are claimable at once")
	}},
	{"ClaimTakesRowsWhileUnderItsByteBound", func(t *testing.T, o *Kit) {
		// 1 KB events: a bound of 2,500 bytes takes three (the bytes
		// before the third are about 2,000, before the fourth about
		// 3,000), in claim order; a bound below one event takes exactly
		// one, so no event is too large to ever be claimed.
		sized := func(key string) herald.Message {
			m := keyed("bytes", key)
			m.Payload = make([]byte, 1000)
			return m
		}
		for _, unordered := range []bool{true, false} {
			var msgs []herald.Message
			for _, k := range []string{"a", "a", "b", "a", "b", "c"} {
				msgs = append(msgs, sized(k))
			}
			ids := o.Write(msgs...)
			token, envs := o.claimP(herald.ClaimParams{Limit: 10, Unordered: unordered, MaxBytes: 2500})
			if unordered {
				require.Equal(t, ids[:3], envIDs(envs), "unordered: the oldest rows while under the bound")
			} else {
				require.Len(t, envs, 3, "ordered: three rows fit the bound")
				require.Equal(t, idsOfKey(envs, "a"), firstOf(ids, msgs, "a", len(idsOfKey(envs, "a"))),
					"ordered: a key's lowest events, never one skipped")
			}
			o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})

			token, envs = o.claimP(herald.ClaimParams{Limit: 10, Unordered: unordered, MaxBytes: 10})
			require.Len(t, envs, 1, "a bound below one event still takes one")
			o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})
			token, envs = o.claimP(herald.ClaimParams{Limit: 10, Unordered: unordered})
			require.Len(t, envs, 2, "no bound: the rest")
			o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})
		}
		_, err := o.d.Store.Claim(o.ctx(), herald.ClaimParams{Token: uuid.NewString(), Owner: o.owner, Limit: 1,
			Lease: time.Minute, MaxBytes: -1})
		require.Error(t, err, "a negative byte bound is refused")
	}},
	{"ClaimReturnsOnlyReadyRows", func(t *testing.T, o *Kit) {
		o.put(heraldadmin.StatePublished, msg("t"))
		o.put(heraldadmin.StateDead, msg("t"))
		o.put(heraldadmin.StateClaimed, msg("t"))
		later := msg("t")
		later.AvailableAt = time.Now().Add(time.Hour)
		o.Write(later)
		ready := o.Write(msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))

		_, first := o.Claim(2, time.Minute)
		require.Equal(t, ready[:2], envIDs(first), "the oldest ready rows, no more than the limit")
		for _, e := range first {
			require.Equal(t, 1, e.Attempt, "the first claim is attempt 1")
		}
		ev := o.Get(first[0].ID)
		require.Equal(t, heraldadmin.StateClaimed, ev.State)
		require.Equal(t, o.owner, ev.ClaimedBy)
		require.NotNil(t, ev.LeaseUntil)
		require.WithinDuration(t, time.Now().Add(time.Minute), *ev.LeaseUntil, clockSkew)

		_, rest := o.Claim(10, time.Minute)
		require.Equal(t, ready[2:], envIDs(rest), "neither published, dead, claimed nor delayed rows")
		_, none := o.Claim(10, time.Minute)
		require.Empty(t, none)
		require.Equal(t, map[string]int64{"t/published": 1, "t/dead": 1, "t/claimed": 6, "t/ready": 1}, o.Counts())
	}},

	{"DelayedMessagesWaitForAvailableAt", func(t *testing.T, o *Kit) {
		const delay = 300 * time.Millisecond
		start := time.Now()
		soon, later := msg("soon"), msg("later")
		soon.AvailableAt = start.Add(delay)
		later.AvailableAt = start.Add(time.Hour)
		ids := o.Write(soon, later)

		_, early := o.Claim(10, time.Minute)
		// Only a claim that returned before the delay proves anything.
		if time.Since(start) < delay {
			require.Empty(t, early, "a message was claimed before its AvailableAt")
		}
		claimed := envIDs(early)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			envs, err := o.tryClaim(uuid.NewString(), 10, time.Minute)
			require.NoError(c, err)
			claimed = append(claimed, envIDs(envs)...)
			require.NotEmpty(c, claimed)
		}, waitFor, 10*time.Millisecond)
		require.Equal(t, ids[:1], claimed, "only the message whose time has come")
		require.False(t, time.Now().Before(soon.AvailableAt), "claimed before its AvailableAt")
		require.Equal(t, heraldadmin.StateReady, o.Get(ids[1]).State)
	}},

	{"ConcurrentClaimersNeverGetTheSameRow", func(t *testing.T, o *Kit) {
		all := o.WriteN("c", 2000)
		var (
			mu  sync.Mutex
			got = make(map[string]int, len(all))
			wg  sync.WaitGroup
		)
		for range 8 {
			wg.Go(func() {
				for {
					envs, err := o.tryClaim(uuid.NewString(), 50, time.Minute)
					if err != nil {
						t.Errorf("claiming: %v", err)
						return
					}
					if len(envs) > 50 {
						t.Errorf("a claim of limit 50 returned %d rows", len(envs))
					}
					if len(envs) == 0 {
						// Done when nothing is left ready. A claim may
						// come back empty before: a claim that walks the
						// keys passes those in flight, up to a bound,
						// and the next one goes on from there.
						st, err := o.d.Admin.Status(o.ctx())
						if err != nil {
							t.Errorf("reading status: %v", err)
							return
						}
						if countsOf(st)["c/ready"] == 0 {
							return
						}
						continue
					}
					mu.Lock()
					for _, e := range envs {
						got[e.ID]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.False(t, t.Failed())
		var twice, missing []string
		for id, n := range got {
			if n > 1 {
				twice = append(twice, id)
			}
		}
		for _, id := range all {
			if got[id] == 0 {
				missing = append(missing, id)
			}
		}
		require.Empty(t, twice, "rows handed to two claimers")
		require.Empty(t, missing, "rows never claimed")
		require.Len(t, got, len(all))
		require.Equal(t, map[string]int64{"c/claimed": 2000}, o.Counts())
	}},

	{"UnorderedClaimTakesTheLongestWaitingFirst", func(t *testing.T, o *Kit) {
		waiting := msg("c")
		waiting.AvailableAt = time.Now().Add(-time.Hour)
		first := msg("a")
		first.Headers = map[string]string{"X-A": "1"}
		ids := o.Write(first, msg("b"), waiting)
		later := msg("later")
		later.AvailableAt = time.Now().Add(time.Hour)
		o.Write(later)

		token, envs := o.claimP(herald.ClaimParams{Limit: 2, Unordered: true})
		require.Equal(t, []string{ids[0], ids[2]}, envIDs(envs),
			"the row available longest first, whatever its seq; returned in seq order")
		require.Less(t, envs[0].Seq, envs[1].Seq)
		require.Equal(t, 1, envs[0].Attempt)
		require.Equal(t, map[string]string{"X-A": "1"}, envs[0].Headers)
		ev := o.Get(ids[0])
		require.Equal(t, heraldadmin.StateClaimed, ev.State)
		require.Equal(t, o.owner, ev.ClaimedBy)
		require.NotNil(t, ev.LeaseUntil)
		require.WithinDuration(t, time.Now().Add(time.Minute), *ev.LeaseUntil, clockSkew)

		_, envs = o.claimP(herald.ClaimParams{Limit: 10, Unordered: true})
		require.Equal(t, ids[1:2], envIDs(envs), "claimed and future rows are not taken")
		_, envs = o.claimP(herald.ClaimParams{Limit: 10, Unordered: true})
		require.Empty(t, envs)
		require.Equal(t, 2, o.Complete(herald.CompleteParams{Token: token, Published: ids}).Published,
			"the claim's token holds the rows it took, and those only")
	}},

	{"NegativeLimitsAreRefusedNotUnlimited", func(t *testing.T, o *Kit) {
		// To some databases a negative LIMIT means no limit at all: a
		// driver refuses one rather than act on every row.
		ctx := o.ctx()
		o.Write(msg("t"), msg("t"))
		require.Len(t, o.claimWith(uuid.NewString(), 2, time.Millisecond), 2)
		published := o.put(heraldadmin.StatePublished, msg("t"))
		o.backdate(48*time.Hour, published...)
		o.Write(msg("t"), msg("t"))
		// Both leases end together: once one was rescued, the other has
		// expired too.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := o.d.Store.RescueExpired(ctx, 1)
			require.NoError(c, err)
			require.Equal(c, 1, n)
		}, waitFor, 5*time.Millisecond)
		counts := o.Counts()
		require.Equal(t, map[string]int64{"t/ready": 3, "t/claimed": 1, "t/published": 1}, counts)

		for _, unordered := range []bool{false, true} {
			_, err := o.d.Store.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Owner: o.owner,
				Limit: -1, Lease: time.Minute, Unordered: unordered})
			require.ErrorContains(t, err, "negative", "Claim, unordered %v", unordered)
		}
		_, err := o.d.Store.RescueExpired(ctx, -1)
		require.ErrorContains(t, err, "negative")
		_, err = o.d.Store.DeletePublished(ctx, time.Hour, -1)
		require.ErrorContains(t, err, "negative")
		require.Equal(t, counts, o.Counts(), "nothing changed")

		// Every row was there to take.
		require.Equal(t, 1, o.rescue(10))
		n, err := o.d.Store.DeletePublished(ctx, time.Hour, 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, envs := o.Claim(10, time.Minute)
		require.Len(t, envs, 4)
	}},
}

// firstOf returns the ids of the first n of msgs with key, in write order.
func firstOf(ids []string, msgs []herald.Message, key string, n int) []string {
	var out []string
	for i, m := range msgs {
		if m.Key == key && len(out) < n {
			out = append(out, ids[i])
		}
	}
	return out
}
