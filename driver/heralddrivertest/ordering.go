package heralddrivertest

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// orderingCases check per-key ordering at the Store seam: which rows an
// ordered claim may take, and what failures, dead events and operators do
// to a key.
var orderingCases = []testCase{
	{"OrderedClaimTakesKeysInSeqOrderAndSkipsKeysInFlight", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "b"), keyed("t", "a"), keyed("t", "b"), keyed("t", "a"))
		token, envs := o.claimP(herald.ClaimParams{Limit: 10, PerKey: 2})
		require.Equal(t, []string{a[0], a[2]}, idsOfKey(envs, "a"), "key a: its two lowest, in order")
		require.Equal(t, []string{a[1], a[3]}, idsOfKey(envs, "b"))

		// Key a has events in flight: its third event waits, and so does a
		// new one, while a new key goes.
		more := o.Write(keyed("t", "a"), keyed("t", "c"))
		_, envs2 := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, []string{more[1]}, envIDs(envs2), "only the new key c; a and b are in flight")

		o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})
		_, envs3 := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, []string{a[4], more[0]}, envIDs(envs3), "key a goes on in order once acknowledged")
	}},

	{"ConcurrentOrderedClaimersNeverShareAKey", func(t *testing.T, o *Kit) {
		const keys, perKey, claimers = 12, 15, 6
		var msgs []herald.Message
		for i := range keys * perKey {
			msgs = append(msgs, keyed("t", fmt.Sprintf("k%02d", i%keys)))
		}
		want := map[string][]string{}
		for i, id := range o.Write(msgs...) {
			want[msgs[i].Key] = append(want[msgs[i].Key], id)
		}
		var (
			mu        sync.Mutex
			holder    = map[string]hold{} // key -> the claim holding it
			published = map[string][]string{}
			wg        sync.WaitGroup
			errs      = make(chan error, claimers)
		)
		for range claimers {
			wg.Go(func() {
				for empty := 0; empty < 50; {
					token := uuid.NewString()
					envs, err := o.tryClaimP(herald.ClaimParams{Token: token, Limit: 7, PerKey: 3, Lease: time.Minute})
					if err != nil {
						errs <- err
						return
					}
					if len(envs) == 0 {
						mu.Lock()
						done := len(holder) == 0 && total(published) == keys*perKey
						mu.Unlock()
						if done {
							return
						}
						empty++
						time.Sleep(time.Millisecond)
						continue
					}
					mu.Lock()
					for _, e := range envs {
						if h, ok := holder[e.Key]; ok && h.token != token && !h.acking {
							mu.Unlock()
							errs <- fmt.Errorf("key %s claimed by %s while %s held it", e.Key, token, h.token)
							return
						}
						holder[e.Key] = hold{token: token}
						published[e.Key] = append(published[e.Key], e.ID)
					}
					mu.Unlock()
					// "Publishing": give the other claimers time to run.
					for range 20 {
						runtime.Gosched()
					}
					// From here the acknowledgement may commit at any moment,
					// and a claimer may then take the key legitimately.
					mu.Lock()
					for _, e := range envs {
						holder[e.Key] = hold{token: token, acking: true}
					}
					mu.Unlock()
					if _, err := o.d.Store.Complete(o.ctx(), herald.CompleteParams{Token: token, Published: envIDs(envs)}); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					for _, e := range envs {
						if holder[e.Key].token == token {
							delete(holder, e.Key)
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for k, ids := range want {
			require.Equal(t, ids, published[k], "key %s was published in write order, each event once", k)
		}
	}},

	{"FailedEventHoldsBackItsKeyOnly", func(t *testing.T, o *Kit) {
		ids := o.Write(keyed("t", "a"), keyed("t", "b"), keyed("t", "a"), keyed("t", "b"), keyed("t", "a"))
		a, b := []string{ids[0], ids[2], ids[4]}, []string{ids[1], ids[3]}
		token, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Len(t, envs, 5)
		res := o.Complete(herald.CompleteParams{Token: token, Published: b, Failed: []herald.Failure{
			{ID: a[0], Outcome: herald.OutcomeRetry, Error: "broker said no", Delay: time.Hour},
			{ID: a[1], Outcome: herald.OutcomeHeldBack, Error: herald.ErrHeldBack.Error()},
			{ID: a[2], Outcome: herald.OutcomeHeldBack, Error: herald.ErrHeldBack.Error()},
		}})
		require.Equal(t, 2, res.Published)
		require.ElementsMatch(t, a, res.Failed)
		require.Equal(t, 1, o.Get(a[0]).Attempt, "the failed event spent its attempt")
		require.Equal(t, "broker said no", o.Get(a[0]).LastError)
		for _, id := range a[1:] {
			ev := o.Get(id)
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Equal(t, 0, ev.Attempt, "a held-back event's attempt is refunded")
		}

		// Key a waits for its failed event; key b, and a new key, go on.
		more := o.Write(keyed("t", "b"), keyed("t", "c"))
		_, envs = o.claimP(herald.ClaimParams{Limit: 10})
		require.ElementsMatch(t, more, envIDs(envs), "nothing of key a while its first event waits for its retry")
		require.Empty(t, o.blockedKeys(), "a retrying key is not parked")
	}},

	{"RetriedEventGoesFirstWhenItIsDue", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "a"), keyed("t", "a"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 10})
		o.Complete(herald.CompleteParams{Token: token, Failed: []herald.Failure{
			{ID: a[0], Outcome: herald.OutcomeRetry, Error: "flaky", Delay: 0},
			{ID: a[1], Outcome: herald.OutcomeHeldBack, Error: "held"},
			{ID: a[2], Outcome: herald.OutcomeHeldBack, Error: "held"},
		}})
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, a, envIDs(envs), "the whole key again, the retried event first")
		require.Equal(t, []int{2, 1, 1}, []int{envs[0].Attempt, envs[1].Attempt, envs[2].Attempt})
	}},

	{"DeadEventParksItsKeyUntilRequeued", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "a"), keyed("t", "b"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 10})
		res := o.Complete(herald.CompleteParams{Token: token, Published: a[2:], Failed: []herald.Failure{
			{ID: a[0], Outcome: herald.OutcomeParked, Error: "poison"},
			{ID: a[1], Outcome: herald.OutcomeHeldBack, Error: "held"},
		}})
		require.ElementsMatch(t, a[:2], res.Failed)
		require.True(t, o.Get(a[0]).Parked)

		late := o.Write(keyed("t", "a"), keyed("t", "b"))
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, late[1:], envIDs(envs), "a parked key gives nothing, even events written after it parked")

		blocked := o.blockedKeys()
		require.Len(t, blocked, 1)
		require.Equal(t, "t", blocked[0].Topic)
		require.Equal(t, "a", blocked[0].Key)
		require.Equal(t, a[0], blocked[0].EventID)
		require.EqualValues(t, 2, blocked[0].Waiting)
		require.WithinDuration(t, time.Now(), blocked[0].Since, clockSkew)

		n, err := o.d.Admin.RequeueDead(o.ctx(), heraldadmin.EventFilter{IDs: a[:1]})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Empty(t, o.blockedKeys())
		_, envs = o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, []string{a[0], a[1], late[0]}, idsOfKey(envs, "a"), "requeued: the key resumes in order")
	}},

	{"DiscardOfAParkingEventNeedsResume", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "a"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 10})
		o.Complete(herald.CompleteParams{Token: token, Failed: []herald.Failure{
			{ID: a[0], Outcome: herald.OutcomeParked, Error: "poison"},
			{ID: a[1], Outcome: herald.OutcomeHeldBack, Error: "held"},
		}})

		_, err := o.d.Admin.DiscardDead(o.ctx(), heraldadmin.EventFilter{IDs: a[:1]})
		var pe *heraldadmin.ParkedError
		require.ErrorAs(t, err, &pe, "discarding a parking event without resume is refused")
		require.Equal(t, a[0], pe.Keys[0].EventID)
		require.EqualValues(t, 1, pe.Keys[0].Waiting)
		require.Equal(t, heraldadmin.StateDead, o.Get(a[0]).State, "nothing was discarded")
		_, err = o.d.Admin.DiscardDead(o.ctx(), heraldadmin.EventFilter{All: true})
		require.ErrorAs(t, err, &pe, "not with All either")

		n, err := o.d.Admin.DiscardDead(o.ctx(), heraldadmin.EventFilter{IDs: a[:1], Resume: true})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		o.requireGone(a[0])
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, a[1:], envIDs(envs), "the key goes on without the discarded event")
	}},

	{"DiscardOfAParkingEventWithNothingWaitingNeedsNoResume", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "b"), keyed("t", "b"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 10})
		o.Complete(herald.CompleteParams{Token: token, Failed: []herald.Failure{
			{ID: a[0], Outcome: herald.OutcomeParked, Error: "poison"},
			{ID: a[1], Outcome: herald.OutcomeParked, Error: "poison"},
			{ID: a[2], Outcome: herald.OutcomeHeldBack, Error: "held"},
		}})
		require.True(t, o.Get(a[0]).Parked)
		require.Len(t, o.blockedKeys(), 2)

		_, err := o.d.Admin.DiscardDead(o.ctx(), heraldadmin.EventFilter{All: true})
		var pe *heraldadmin.ParkedError
		require.ErrorAs(t, err, &pe, "key b has an event waiting")
		require.Len(t, pe.Keys, 1, "only the key with events waiting is named")
		require.Equal(t, a[1], pe.Keys[0].EventID)
		require.Equal(t, heraldadmin.StateDead, o.Get(a[0]).State, "nothing was discarded")

		n, err := o.d.Admin.DiscardDead(o.ctx(), heraldadmin.EventFilter{IDs: a[:1]})
		require.NoError(t, err, "nothing waits behind key a: discarding is letting it go on")
		require.Equal(t, 1, n)
		o.requireGone(a[0])
		require.Len(t, o.blockedKeys(), 1)
		late := o.Write(keyed("t", "a"))
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, late, envIDs(envs), "key a goes on; key b stays parked")
	}},

	{"DeadEventWithoutParkLetsItsKeyGoOn", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "a"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 10})
		res := o.Complete(herald.CompleteParams{Token: token, Failed: []herald.Failure{
			{ID: a[0], Outcome: herald.OutcomeDead, Error: "poison"},
			{ID: a[1], Outcome: herald.OutcomeHeldBack, Error: "held"},
		}})
		require.ElementsMatch(t, a, res.Failed)
		require.False(t, o.Get(a[0]).Parked)
		require.Empty(t, o.blockedKeys())
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, a[1:], envIDs(envs), "skipped: the key goes on")
		n, err := o.d.Admin.DiscardDead(o.ctx(), heraldadmin.EventFilter{IDs: a[:1]})
		require.NoError(t, err, "a dead event that parks nothing is discarded without resume")
		require.Equal(t, 1, n)
	}},

	{"DelayedEventHoldsBackItsKey", func(t *testing.T, o *Kit) {
		first := keyed("t", "a")
		first.AvailableAt = time.Now().Add(time.Hour)
		ids := o.Write(first, keyed("t", "a"), keyed("t", "b"))
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, ids[2:], envIDs(envs), "key a waits for its delayed first event")
	}},

	{"UnorderedEventsAreNotHeldBack", func(t *testing.T, o *Kit) {
		// The empty key and UnorderedTopics are claimed by age: two claimers
		// share them, and a claimed event holds nothing back.
		ids := o.Write(keyed("t", ""), keyed("t", ""), keyed("free", "a"), keyed("free", "a"))
		p := herald.ClaimParams{Limit: 2, PerKey: 1, UnorderedTopics: []string{"free"}}
		_, first := o.claimP(p)
		_, second := o.claimP(p)
		got := append(envIDs(first), envIDs(second)...)
		require.ElementsMatch(t, ids, got, "all four claimed by two claimers, though keys were in flight")

		more := o.Write(keyed("u", "x"), keyed("u", "x"))
		token, _ := o.claimP(herald.ClaimParams{Limit: 1, Unordered: true})
		_, envs := o.claimP(herald.ClaimParams{Limit: 1, Unordered: true})
		require.Equal(t, more[1:], envIDs(envs), "a relay-wide unordered claim takes a key's next event while one is in flight")
		o.Complete(herald.CompleteParams{Token: token, Published: more[:1]})
	}},

	{"RescuedKeyIsClaimedAgainInOrder", func(t *testing.T, o *Kit) {
		a := o.Write(keyed("t", "a"), keyed("t", "a"), keyed("t", "a"))
		o.claimP(herald.ClaimParams{Limit: 10, Lease: time.Millisecond})
		require.Eventually(t, func() bool {
			n, err := o.d.Store.RescueExpired(o.ctx(), 10)
			return err == nil && n == 3
		}, waitFor, 5*time.Millisecond)
		_, envs := o.claimP(herald.ClaimParams{Limit: 10})
		require.Equal(t, a, envIDs(envs))
	}},

	{"EveryKeyGetsItsTurnBehindManyBlockedKeys", func(t *testing.T, o *Kit) {
		// 150 parked keys, each with an event waiting behind it, sort before
		// the free keys; each claim walks a bounded number of keys and the
		// next goes on from there, so the free keys are reached.
		parked := func() []herald.Message {
			var msgs []herald.Message
			for i := range 150 {
				msgs = append(msgs, keyed("t", fmt.Sprintf("a%03d", i)))
			}
			return msgs
		}
		ids := o.Write(parked()...)
		token, envs := o.claimP(herald.ClaimParams{Limit: 200})
		require.Len(t, envs, 150)
		failed := make([]herald.Failure, len(ids))
		for i, id := range ids {
			failed[i] = herald.Failure{ID: id, Outcome: herald.OutcomeParked, Error: "poison"}
		}
		require.Len(t, o.Complete(herald.CompleteParams{Token: token, Failed: failed}).Failed, 150)
		o.Write(parked()...)
		free := o.Write(keyed("t", "z1"), keyed("t", "z2"), keyed("t", "z3"))

		var got []string
		for claims := 0; len(got) < len(free); claims++ {
			require.Less(t, claims, 10, "the free keys were not reached in 10 claims")
			_, envs := o.claimP(herald.ClaimParams{Limit: 10})
			got = append(got, envIDs(envs)...)
		}
		require.ElementsMatch(t, free, got, "only the free keys' events")
	}},
}

// hold is a claim's hold on a key in ConcurrentOrderedClaimersNeverShareAKey.
type hold struct {
	token  string
	acking bool // its acknowledgement is under way
}

func (o *Kit) blockedKeys() []heraldadmin.BlockedKey {
	o.t.Helper()
	keys, err := o.d.Admin.BlockedKeys(o.ctx(), 100)
	require.NoError(o.t, err)
	return keys
}

// tryClaimP is claimP for goroutines other than the test's.
func (o *Kit) tryClaimP(p herald.ClaimParams) ([]herald.Envelope, error) {
	p.Owner = o.owner
	envs, err := o.d.Store.Claim(o.ctx(), p)
	if err != nil {
		return nil, err
	}
	if !slices.IsSortedFunc(envs, func(a, b herald.Envelope) int { return int(a.Seq - b.Seq) }) {
		return nil, fmt.Errorf("claimed envelopes are not sorted by seq")
	}
	return envs, nil
}

func total(m map[string][]string) int {
	n := 0
	for _, ids := range m {
		n += len(ids)
	}
	return n
}
