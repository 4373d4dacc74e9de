package heralddrivertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// pauseCases check operators' pauses: a claim leaves a paused topic's
// events alone, ready and untouched, whatever the claim form; the pauses
// are stored and resumed; and a relay honours them end to end, keeping
// each key's order across the pause.
var pauseCases = []testCase{
	{"ClaimLeavesPausedTopicsAloneOrderedOrNot", func(t *testing.T, o *Kit) {
		for _, unordered := range []bool{false, true} {
			held := o.Write(keyed("held", "a"), keyed("held", "b"), keyed("held", "a"), msg("held"))
			free := o.Write(keyed("free", "a"), msg("free"))
			paused := herald.ClaimParams{Limit: 10, Unordered: unordered, PausedTopics: []string{"held"}}
			token, envs := o.claimP(paused)
			require.ElementsMatch(t, free, envIDs(envs), "unordered=%v: only the topic that is not paused", unordered)
			o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})
			_, envs = o.claimP(paused)
			require.Empty(t, envs, "unordered=%v: nothing of a paused topic, however often claimed", unordered)
			for _, id := range held {
				ev := o.Get(id)
				require.Equal(t, heraldadmin.StateReady, ev.State, "a paused event stays ready")
				require.Zero(t, ev.Attempt, "a paused event spends no attempt")
			}

			token, envs = o.claimP(herald.ClaimParams{Limit: 10, Unordered: unordered})
			require.ElementsMatch(t, held, envIDs(envs), "unordered=%v: resumed, every held event is claimed", unordered)
			require.Equal(t, []string{held[0], held[2]}, idsOfKey(envs, "a"), "key a in write order")
			o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})
		}
	}},

	{"ClaimPassesAPausedTopicInOneStepWhateverItsKeys", func(t *testing.T, o *Kit) {
		// The walk visits a bounded number of keys per claim (at least
		// 64). A paused topic of 300 keys, walked key by key, would use
		// them all and leave the next topic unclaimed.
		var msgs []herald.Message
		for i := range 300 {
			msgs = append(msgs, keyed("a.paused", fmt.Sprintf("k%03d", i)))
		}
		o.Write(msgs...)
		want := o.Write(keyed("b.free", "x"))
		for _, unordered := range []bool{false, true} {
			token, envs := o.claimP(herald.ClaimParams{Limit: 1, Unordered: unordered, PausedTopics: []string{"a.paused"}})
			require.Equal(t, want, envIDs(envs), "unordered=%v: the first claim reaches the topic after the paused one", unordered)
			n, err := o.d.Store.ReleaseClaim(o.ctx(), token)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}
	}},

	{"PausesAreStoredAndResumed", func(t *testing.T, o *Kit) {
		admin := o.d.Admin
		require.NoError(t, admin.Pause(o.ctx(), heraldadmin.PauseParams{
			Kind: herald.PauseTopic, Name: "orders", Reason: "consumer migration", By: "ann@ops"}))
		ps, err := o.d.Store.Pauses(o.ctx())
		require.NoError(t, err)
		require.Len(t, ps, 1)
		first := ps[0]
		require.Equal(t, herald.PauseTopic, first.Kind)
		require.Equal(t, "orders", first.Name)
		require.True(t, first.Paused)
		require.Equal(t, "consumer migration", first.Reason)
		require.Equal(t, "ann@ops", first.By)
		require.WithinDuration(t, o.databaseNow(), first.Since, clockSkew)
		require.True(t, first.Resumed.IsZero())

		require.NoError(t, admin.Pause(o.ctx(), heraldadmin.PauseParams{Kind: herald.PauseTopic, Name: "orders", Reason: "still migrating", By: "bob"}))
		ps, err = admin.Pauses(o.ctx())
		require.NoError(t, err)
		require.Len(t, ps, 1, "pausing what is paused changes the pause, adds none")
		require.Equal(t, "still migrating", ps[0].Reason)
		require.True(t, ps[0].Since.Equal(first.Since), "and keeps when it began")

		ok, err := admin.Resume(o.ctx(), herald.PauseTopic, "orders")
		require.NoError(t, err)
		require.True(t, ok)
		ps, err = admin.Pauses(o.ctx())
		require.NoError(t, err)
		require.False(t, ps[0].Paused)
		require.False(t, ps[0].Resumed.Before(first.Since), "the resume's time is kept, for MaxAge")
		ok, err = admin.Resume(o.ctx(), herald.PauseTopic, "orders")
		require.NoError(t, err)
		require.False(t, ok, "nothing in force to resume")
		ok, err = admin.Resume(o.ctx(), herald.PauseDestination, "orders")
		require.NoError(t, err)
		require.False(t, ok, "a destination is not a topic of the same name")

		require.NoError(t, admin.Pause(o.ctx(), heraldadmin.PauseParams{Kind: herald.PauseDestination, Name: "kafka"}))
		ps, err = admin.Pauses(o.ctx())
		require.NoError(t, err)
		require.Equal(t, []herald.PauseKind{herald.PauseDestination, herald.PauseTopic}, []herald.PauseKind{ps[0].Kind, ps[1].Kind},
			"ordered by kind, then name")

		for _, bad := range []heraldadmin.PauseParams{
			{Kind: "queue", Name: "x"},
			{Kind: herald.PauseTopic, Name: "  "},
			{Kind: herald.PauseTopic, Name: "x", Reason: strings.Repeat("r", heraldadmin.MaxPauseText+1)},
			{Kind: herald.PauseTopic, Name: "x\x00y"},
		} {
			require.Error(t, admin.Pause(o.ctx(), bad), "%+v", bad)
		}
		ps, err = admin.Pauses(o.ctx())
		require.NoError(t, err)
		require.Len(t, ps, 2, "a refused pause stores nothing")
	}},

	{"ReadyTopicsListsTheTopicsWithReadyEvents", func(t *testing.T, o *Kit) {
		topics, err := o.d.Store.ReadyTopics(o.ctx())
		require.NoError(t, err)
		require.Empty(t, topics)
		o.Write(keyed("t2", "k"))
		token, envs := o.claimP(herald.ClaimParams{Limit: 1, Unordered: true})
		o.Complete(herald.CompleteParams{Token: token, Published: envIDs(envs)})
		o.Write(msg("t3"), msg("t1"), keyed("t1", "k"))
		topics, err = o.d.Store.ReadyTopics(o.ctx())
		require.NoError(t, err)
		require.Equal(t, []string{"t1", "t3"}, topics, "in order, each once, none without a ready event")
	}},

	{"RelayHoldsPausedTopicsAndDestinationsAndResumesThemInOrder", func(t *testing.T, o *Kit) {
		for _, unordered := range []bool{false, true} {
			p := fmt.Sprintf("u%v.", unordered)
			dest := p + "dest"
			require.NoError(t, o.d.Admin.Pause(o.ctx(), heraldadmin.PauseParams{Kind: herald.PauseTopic, Name: p + "held"}))
			require.NoError(t, o.d.Admin.Pause(o.ctx(), heraldadmin.PauseParams{Kind: herald.PauseDestination, Name: dest}))
			rec := NewRecorder()
			relay := StartRelay(t, o.d.Store, rec, func(c *herald.RelayConfig) {
				c.Unordered = unordered
				c.DestinationOf = func(topic string) string {
					if strings.HasPrefix(topic, p+"routed") {
						return dest
					}
					return "other"
				}
			})
			// Written once the relay has read the pauses (it delivered an
			// event since): the routed topic is new to it, and still never
			// sent.
			rec.RequireAllDeliveredOnce(t, o.Write(msg(p+"free")))
			held := o.Write(keyed(p+"held", "k"), keyed(p+"held", "k"), msg(p+"held"), keyed(p+"held", "k"))
			routed := o.Write(keyed(p+"routed.x", "k"), keyed(p+"routed.x", "k"))
			free := o.Write(keyed(p+"free", "k"), msg(p+"free"), keyed(p+"free", "k"))
			rec.RequireAllDeliveredOnce(t, free)
			// A routed event may be on its way back from a claim that
			// found its destination paused: ready again, unsent.
			require.Eventually(t, func() bool {
				for _, id := range slices.Concat(held, routed) {
					if ev := o.Get(id); ev.State != heraldadmin.StateReady || ev.Attempt != 0 {
						return false
					}
				}
				return true
			}, waitFor, 5*time.Millisecond, "unordered=%v: paused events stay ready and spend no attempt", unordered)
			for _, id := range slices.Concat(held, routed) {
				require.Zero(t, rec.Count(id), "unordered=%v: a paused event is never sent", unordered)
			}

			for kind, name := range map[herald.PauseKind]string{herald.PauseTopic: p + "held", herald.PauseDestination: dest} {
				ok, err := o.d.Admin.Resume(o.ctx(), kind, name)
				require.NoError(t, err)
				require.True(t, ok)
			}
			rec.RequireAllDeliveredOnce(t, slices.Concat(held, routed))
			if !unordered {
				require.Equal(t, []string{held[0], held[1], held[3]}, rec.OrderOf(held[0], held[1], held[3]),
					"a key resumes in write order")
				require.Equal(t, routed, rec.OrderOf(routed...))
			}
			require.Zero(t, relay.Stats().Dead)
			stopRelay(t, relay) // the next round's events are for its own relay
		}
	}},

	{"RelayCountsMaxAgeFromTheEndOfAPause", func(t *testing.T, o *Kit) {
		// Paused past MaxAge (an hour in StartRelay), an event fails once
		// after the resume: it is retried, not dead, because MaxAge counts
		// from the resume.
		ids := o.Write(keyed("aged", "k"))
		o.backdate(2*time.Hour, ids...)
		require.NoError(t, o.d.Admin.Pause(o.ctx(), heraldadmin.PauseParams{Kind: herald.PauseTopic, Name: "aged"}))
		ok, err := o.d.Admin.Resume(o.ctx(), herald.PauseTopic, "aged")
		require.NoError(t, err)
		require.True(t, ok)
		rec := NewRecorder()
		rec.Fail = func(_ herald.Envelope, attempt int) error {
			if attempt == 1 {
				return errors.New("broker hiccup")
			}
			return nil
		}
		relay := StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, ids)
		require.Zero(t, relay.Stats().Dead)
	}},
}

// stopRelay stops a relay StartRelay started before the test ends.
func stopRelay(t *testing.T, r *herald.Relay) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	require.NoError(t, r.Stop(ctx))
}
