package heralddrivertest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// relaysCases check the relays' heartbeats: a beat writes its relay's row,
// listed by heraldadmin.Relays oldest start first; an expired row is not
// listed and the next beat of any relay deletes it; Gone deletes a row; and
// relays running on one table are listed until they stop.
var relaysCases = []testCase{
	{"HeartbeatsWriteOneRowPerRelayListedOldestStartFirst", func(t *testing.T, o *Kit) {
		hb, relays := o.heartbeats()
		require.Empty(t, o.relays(relays))
		now := o.databaseNow()
		require.NoError(t, hb.Beat(o.ctx(), beat("relay-a", 0)))
		listed := o.relays(relays)
		require.Len(t, listed, 1)
		a := listed[0]
		require.Equal(t, "relay-a", a.Owner)
		require.Equal(t, "v1.2.3", a.Version)
		require.WithinDuration(t, now, a.StartedAt, clockSkew, "times are the database's")
		require.False(t, a.HeartbeatAt.Before(a.StartedAt))
		require.Nil(t, a.LastClaimAt, "no claim yet")
		require.Zero(t, a.Leased)
		require.Zero(t, a.Published)

		require.NoError(t, hb.Beat(o.ctx(), beat("relay-b", time.Hour)))
		listed = o.relays(relays)
		require.Equal(t, []string{"relay-b", "relay-a"}, owners(listed), "the relay that started first, first")
		require.InDelta(t, time.Hour, a.StartedAt.Sub(listed[0].StartedAt), float64(clockSkew), "b started an hour before its beat")

		later := beat("relay-a", 10*time.Hour) // a later beat keeps the start, whatever it says of it
		later.First, later.SinceClaim, later.Leased, later.Published, later.Version = false, 2*time.Second, 5, 7, "v1.2.4"
		require.NoError(t, hb.Beat(o.ctx(), later))
		listed = o.relays(relays)
		require.Equal(t, []string{"relay-b", "relay-a"}, owners(listed), "a beat updates its relay's row, adds none")
		a2 := listed[1]
		require.True(t, a2.StartedAt.Equal(a.StartedAt), "the start is kept: %s, then %s", a.StartedAt, a2.StartedAt)
		require.False(t, a2.HeartbeatAt.Before(a.HeartbeatAt))
		require.NotNil(t, a2.LastClaimAt)
		require.InDelta(t, 2*time.Second, a2.HeartbeatAt.Sub(*a2.LastClaimAt), float64(10*time.Millisecond),
			"the last claim, two seconds before the beat by the database clock")
		require.Equal(t, int64(5), a2.Leased)
		require.Equal(t, int64(7), a2.Published)
		require.Equal(t, "v1.2.4", a2.Version)

		// A relay's first beat replaces a row left under its owner: the
		// same host and pid after a restart is a new relay.
		require.NoError(t, hb.Beat(o.ctx(), beat("relay-a", 2*time.Hour)))
		require.Equal(t, []string{"relay-a", "relay-b"}, owners(o.relays(relays)), "a's start is now two hours ago")
	}},

	{"ExpiredHeartbeatsAreHiddenAndDeletedByTheNextBeatOfAnyRelay", func(t *testing.T, o *Kit) {
		hb, relays := o.heartbeats()
		require.NoError(t, hb.Beat(o.ctx(), beat("relay-other", 0)))
		dead := beat("relay-dead", 0)
		dead.Expiry = time.Millisecond
		require.NoError(t, hb.Beat(o.ctx(), dead))
		require.Eventually(t, func() bool {
			return slices.Equal(owners(o.relays(relays)), []string{"relay-other"})
		}, waitFor, time.Millisecond, "a relay not heard of past its expiry is not listed")

		// Another relay's beat deletes the expired row, and no other. The
		// dead relay's own next beat (not its first) shows it: a row still
		// there would keep its start, a new one starts five hours ago.
		require.NoError(t, hb.Beat(o.ctx(), beat("relay-alive", 0)))
		back := beat("relay-dead", 5*time.Hour)
		back.First = false
		require.NoError(t, hb.Beat(o.ctx(), back))
		listed := o.relays(relays)
		require.Equal(t, []string{"relay-dead", "relay-other", "relay-alive"}, owners(listed))
		require.InDelta(t, 5*time.Hour, listed[2].StartedAt.Sub(listed[0].StartedAt), float64(clockSkew),
			"the expired row was deleted: its relay's new row starts five hours before the beat")
	}},

	{"GoneDeletesTheRelaysRow", func(t *testing.T, o *Kit) {
		hb, relays := o.heartbeats()
		require.NoError(t, hb.Beat(o.ctx(), beat("relay-a", time.Minute)))
		require.NoError(t, hb.Beat(o.ctx(), beat("relay-b", 0)))
		require.NoError(t, hb.Gone(o.ctx(), "relay-a"))
		require.Equal(t, []string{"relay-b"}, owners(o.relays(relays)))
		require.NoError(t, hb.Gone(o.ctx(), "relay-a"), "a relay gone twice is no error")
		require.NoError(t, hb.Gone(o.ctx(), "never-was"))
		require.Equal(t, []string{"relay-b"}, owners(o.relays(relays)))
	}},

	{"HeartbeatsAreChecked", func(t *testing.T, o *Kit) {
		hb, relays := o.heartbeats()
		for name, mod := range map[string]func(b *herald.RelayBeat){
			"EmptyOwner":      func(b *herald.RelayBeat) { b.Owner = " " },
			"OwnerWithNUL":    func(b *herald.RelayBeat) { b.Owner = "a\x00b" },
			"VersionTooLong":  func(b *herald.RelayBeat) { b.Version = strings.Repeat("v", 1025) },
			"NoExpiry":        func(b *herald.RelayBeat) { b.Expiry = 0 },
			"NegativeRunning": func(b *herald.RelayBeat) { b.Running = -time.Second },
			"NegativeCount":   func(b *herald.RelayBeat) { b.Leased = -1 },
		} {
			b := beat("relay-a", 0)
			mod(&b)
			require.Error(t, hb.Beat(o.ctx(), b), name)
		}
		require.Empty(t, o.relays(relays), "a refused beat writes nothing")
	}},

	{"RelaysOnOneTableAreListedUntilTheyStop", func(t *testing.T, o *Kit) {
		_, relays := o.heartbeats()
		rec := NewRecorder()
		start := func(owner string, store herald.Store) *herald.Relay {
			return StartRelay(t, store, rec, func(c *herald.RelayConfig) {
				// Short enough for a quick test, long enough that a beat
				// delayed on a loaded machine (SQLite has one writer) does
				// not make a running relay look stale (10 intervals).
				c.Owner, c.HeartbeatInterval = owner, 100*time.Millisecond
			})
		}
		one := start("relay-one", o.d.Store)
		start("relay-two", o.d.Open(t)) // as a second process holds it
		require.Eventually(t, func() bool {
			return slices.Equal(sortedOwners(o.relays(relays)), []string{"relay-one", "relay-two"})
		}, waitFor, 5*time.Millisecond, "both relays are listed, from either's store")
		for _, r := range o.relays(relays) {
			require.NotEmpty(t, r.Version, "%s says which Herald it runs", r.Owner)
		}

		ids := o.WriteN("listed", 50)
		rec.RequireAllDeliveredOnce(t, ids)
		require.Eventually(t, func() bool {
			var published int64
			claimed := false
			for _, r := range o.relays(relays) {
				published += r.Published
				claimed = claimed || r.LastClaimAt != nil
			}
			return published == int64(len(ids)) && claimed
		}, waitFor, 5*time.Millisecond, "the relays' beats count what they published, and when they last claimed")

		stopRelay(t, one)
		require.NotContains(t, owners(o.relays(relays)), "relay-one", "a stopped relay is gone from the list at once")
		require.Eventually(t, func() bool { return slices.Equal(owners(o.relays(relays)), []string{"relay-two"}) },
			waitFor, 5*time.Millisecond, "the other relay is still listed")
	}},
}

// heartbeats returns the driver's herald.Heartbeats and heraldadmin.Relays,
// which every driver implements.
func (o *Kit) heartbeats() (herald.Heartbeats, heraldadmin.Relays) {
	o.t.Helper()
	hb, ok := o.d.Store.(herald.Heartbeats)
	require.True(o.t, ok, "the driver's Store implements no herald.Heartbeats: its relays are listed nowhere; implement it, or name the case in Harness.Skip with the reason")
	relays, ok := o.d.Admin.(heraldadmin.Relays)
	require.True(o.t, ok, "the driver's Admin implements no heraldadmin.Relays; implement it, or name the case in Harness.Skip with the reason")
	return hb, relays
}

func (o *Kit) relays(r heraldadmin.Relays) []heraldadmin.RelayInfo {
	o.t.Helper()
	listed, err := r.ListRelays(o.ctx())
	require.NoError(o.t, err)
	return listed
}

// beat is a relay's first beat, of a relay that started running ago.
func beat(owner string, running time.Duration) herald.RelayBeat {
	return herald.RelayBeat{Owner: owner, Version: "v1.2.3", First: true, Running: running, SinceClaim: -1, Expiry: time.Minute}
}

func owners(rs []heraldadmin.RelayInfo) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Owner
	}
	return out
}

func sortedOwners(rs []heraldadmin.RelayInfo) []string {
	out := owners(rs)
	slices.Sort(out)
	return out
}
