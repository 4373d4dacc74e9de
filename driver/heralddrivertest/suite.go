package heralddrivertest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Exercise runs every case of the suite against the driver h builds, each
// as a parallel subtest with an outbox of its own from h.New.
//
// Cases speak to the driver only through the Driver's fields (Store, Admin,
// Write, Backdate), never SQL, so the same expectations hold for every
// dialect: counts come from Admin.Status, rows from Admin.GetEvent and
// Admin.ListEvents. Timestamps a driver returns are compared with each
// other, which involves the database clock only; where a case compares one
// with the test's clock it allows clockSkew. Delayed messages are the
// exception: their AvailableAt comes from the test's clock, so the database
// must run on a clock that agrees with it to well under 300ms (any local
// or NTP-synchronised server does).
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil || h.Name == "" {
		t.Fatal("heralddrivertest: Harness.Name and Harness.New are required")
	}
	all := slices.Concat(cases, orderingCases, backlogCases)
	known := make(map[string]bool, len(all))
	for _, c := range all {
		known[c.name] = true
	}
	for name := range h.Skip {
		// A misspelt skip would leave a driver's known gap failing under a
		// name nobody declared, and the declared one rotting.
		if !known[name] {
			t.Errorf("heralddrivertest: Harness.Skip names %q, which is no case of the suite", name)
		}
	}
	for _, c := range all {
		t.Run(c.name, func(t *testing.T) {
			if reason, ok := h.Skip[c.name]; ok {
				t.Skip(reason)
			}
			t.Parallel()
			c.run(t, &outbox{t: t, d: h.New(t), owner: "heralddrivertest/" + h.Name})
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, o *outbox)
}

// released is the acknowledgement of a relay that stops before the broker
// confirmed ids: ready again at once, attempts refunded.
func released(ids ...string) []herald.Failure {
	out := make([]herald.Failure, len(ids))
	for i, id := range ids {
		out[i] = herald.Failure{ID: id, Outcome: herald.OutcomeReleased}
	}
	return out
}

// clockSkew is how far the suite lets the database's clock differ from the
// test's where it compares the two.
const clockSkew = time.Minute

// waitFor bounds every wait of the suite; cases finish far sooner unless
// the driver is broken.
const waitFor = 10 * time.Second

// cases is the suite. Names are stable: drivers refer to them in Skip.
var cases = []testCase{
	{"WriteThenCommitMakesRowsReady", func(t *testing.T, o *outbox) {
		ids := o.write(msg("orders"), msg("orders"), msg("payments"))
		require.Equal(t, map[string]int64{"orders/ready": 2, "payments/ready": 1}, o.counts())

		rows := o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})
		require.Equal(t, ids, rowIDs(rows), "listed in write order")
		for i, ev := range rows {
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Zero(t, ev.Attempt)
			require.Empty(t, ev.ClaimedBy)
			require.Nil(t, ev.LeaseUntil)
			require.Nil(t, ev.PublishedAt)
			require.Nil(t, ev.DeadAt)
			require.Empty(t, ev.LastError)
			require.WithinDuration(t, time.Now(), ev.CreatedAt, clockSkew)
			require.WithinDuration(t, ev.CreatedAt, ev.AvailableAt, time.Second,
				"without AvailableAt a message is available when written")
			if i > 0 {
				require.Greater(t, ev.Seq, rows[i-1].Seq, "seq increases in write order")
			}
		}
		_, envs := o.claim(10, time.Minute)
		require.Equal(t, ids, envIDs(envs))
	}},

	{"WriteThenRollbackLeavesNothing", func(t *testing.T, o *outbox) {
		ghosts := []herald.Message{msg("t"), msg("t")}
		require.NoError(t, o.d.Write(o.ctx(), ghosts, false))
		kept := o.write(msg("t"))
		for _, g := range ghosts {
			o.requireGone(g.ID)
		}
		require.Equal(t, kept, rowIDs(o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})))
		_, envs := o.claim(10, time.Minute)
		require.Equal(t, kept, envIDs(envs), "a rolled-back message is never claimable")
		_, envs = o.claim(10, time.Minute)
		require.Empty(t, envs)
		require.Equal(t, map[string]int64{"t/claimed": 1}, o.counts())
	}},

	{"InvalidMessageWritesNothing", func(t *testing.T, o *outbox) {
		for _, tc := range []struct {
			field string
			bad   herald.Message
		}{
			{"topic", herald.Message{}},
			{"topic", herald.Message{Topic: "has space"}},
			{"id", herald.Message{Topic: "t", ID: "not-a-uuid"}},
			{"type", herald.Message{Topic: "t", Type: "nul\x00"}},
			{"headers", herald.Message{Topic: "t", Headers: map[string]string{"Herald-Id": "forged"}}},
			{"headers[X-A]", herald.Message{Topic: "t", Headers: map[string]string{"X-A": "a\r\nb"}}},
			{"payload", herald.Message{Topic: "t", Payload: make([]byte, o.d.payloadCap()+1)}},
		} {
			valid := msg("t")
			err := o.d.Write(o.ctx(), []herald.Message{valid, tc.bad}, true)
			var ve *herald.ValidationError
			require.ErrorAs(t, err, &ve, "field %s", tc.field)
			require.ErrorIs(t, err, herald.ErrInvalidMessage)
			require.Equal(t, 1, ve.Index, "the second message is the invalid one")
			require.Equal(t, tc.field, ve.Field)
			o.requireGone(valid.ID)
		}
		require.Empty(t, o.counts(), "nothing was written")
	}},

	{"HeadersAndFieldsRoundTrip", func(t *testing.T, o *outbox) {
		payload := make([]byte, 256)
		for i := range payload {
			payload[i] = byte(i)
		}
		at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
		full := herald.Message{
			// Upper case: the id is stored, returned and found in its
			// canonical lower-case form.
			ID:    strings.ToUpper(herald.NewID()),
			Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			Payload: payload,
			Headers: map[string]string{
				"X-Tenant":    "acme",
				"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"X-Text":      `héllo, wörld ✓ "quoted" \back\slash {"json":1}`,
				"X-Empty":     "",
			},
			AvailableAt: at,
		}
		keyed := herald.Message{Topic: "orders.placed", Key: "customer-7", AggregateID: "42"}
		ids := o.write(full, keyed)
		id := strings.ToLower(full.ID)

		_, envs := o.claim(10, time.Minute)
		require.Len(t, envs, 2)
		byID := map[string]herald.Envelope{envs[0].ID: envs[0], envs[1].ID: envs[1]}
		env, ok := byID[id]
		require.True(t, ok, "claimed %v, want %s among them", envIDs(envs), id)
		require.Equal(t, 1, env.Attempt)
		require.Positive(t, env.Seq)
		require.WithinDuration(t, time.Now(), env.CreatedAt, clockSkew)

		row, err := o.d.Admin.GetEvent(o.ctx(), full.ID) // upper case on purpose
		require.NoError(t, err)
		for src, got := range map[string]herald.Message{"claim": env.Message, "GetEvent": row.Message} {
			require.Equal(t, id, got.ID, src)
			require.Equal(t, full.Topic, got.Topic, src)
			require.Equal(t, "42", got.Key, "%s: the key defaults to the aggregate id", src)
			require.Equal(t, full.Type, got.Type, src)
			require.Equal(t, full.AggregateType, got.AggregateType, src)
			require.Equal(t, full.AggregateID, got.AggregateID, src)
			require.Equal(t, payload, got.Payload, "%s: every byte value survives", src)
			require.Equal(t, full.Headers, got.Headers, src)
		}
		require.Equal(t, env.Seq, row.Seq)
		require.True(t, row.CreatedAt.Equal(env.CreatedAt), "created_at %v by GetEvent, %v by Claim", row.CreatedAt, env.CreatedAt)
		require.True(t, row.AvailableAt.Equal(at), "available_at %v, want %v", row.AvailableAt, at)

		other := byID[ids[1]]
		require.Equal(t, "customer-7", other.Key, "an explicit key is kept")
		require.Empty(t, other.Payload)
		require.Empty(t, other.Headers)
		row = o.get(ids[1])
		require.Equal(t, "customer-7", row.Key)
		require.Empty(t, row.Payload)
		require.Empty(t, row.Headers)
	}},

	{"LargePayloadAtTheCap", func(t *testing.T, o *outbox) {
		limit := o.d.payloadCap()
		big := make([]byte, limit)
		for i := range big {
			big[i] = byte(i*7 + i>>8)
		}
		id := o.write(herald.Message{Topic: "big", Payload: big})[0]
		_, envs := o.claim(1, time.Minute)
		require.Len(t, envs, 1)
		// bytes.Equal, not require.Equal: a diff of a MiB helps nobody.
		require.True(t, bytes.Equal(big, envs[0].Payload), "claimed payload of %d bytes differs from the %d written", len(envs[0].Payload), limit)
		require.True(t, bytes.Equal(big, o.get(id).Payload), "stored payload differs from the %d bytes written", limit)

		over := herald.Message{ID: herald.NewID(), Topic: "big", Payload: append(big, 0x01)}
		err := o.d.Write(o.ctx(), []herald.Message{over}, true)
		var ve *herald.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "payload", ve.Field)
		o.requireGone(over.ID)
		require.Equal(t, map[string]int64{"big/claimed": 1}, o.counts())
	}},

	{"ClaimReturnsOnlyReadyRows", func(t *testing.T, o *outbox) {
		o.put(heraldadmin.StatePublished, msg("t"))
		o.put(heraldadmin.StateDead, msg("t"))
		o.put(heraldadmin.StateClaimed, msg("t"))
		later := msg("t")
		later.AvailableAt = time.Now().Add(time.Hour)
		o.write(later)
		ready := o.write(msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))

		_, first := o.claim(2, time.Minute)
		require.Equal(t, ready[:2], envIDs(first), "the oldest ready rows, no more than the limit")
		for _, e := range first {
			require.Equal(t, 1, e.Attempt, "the first claim is attempt 1")
		}
		ev := o.get(first[0].ID)
		require.Equal(t, heraldadmin.StateClaimed, ev.State)
		require.Equal(t, o.owner, ev.ClaimedBy)
		require.NotNil(t, ev.LeaseUntil)
		require.WithinDuration(t, time.Now().Add(time.Minute), *ev.LeaseUntil, clockSkew)

		_, rest := o.claim(10, time.Minute)
		require.Equal(t, ready[2:], envIDs(rest), "neither published, dead, claimed nor delayed rows")
		_, none := o.claim(10, time.Minute)
		require.Empty(t, none)
		require.Equal(t, map[string]int64{"t/published": 1, "t/dead": 1, "t/claimed": 6, "t/ready": 1}, o.counts())
	}},

	{"DelayedMessagesWaitForAvailableAt", func(t *testing.T, o *outbox) {
		const delay = 300 * time.Millisecond
		start := time.Now()
		soon, later := msg("soon"), msg("later")
		soon.AvailableAt = start.Add(delay)
		later.AvailableAt = start.Add(time.Hour)
		ids := o.write(soon, later)

		_, early := o.claim(10, time.Minute)
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
		require.Equal(t, heraldadmin.StateReady, o.get(ids[1]).State)
	}},

	{"ConcurrentClaimersNeverGetTheSameRow", func(t *testing.T, o *outbox) {
		all := o.writeN("c", 2000)
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
						return
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
		require.Equal(t, map[string]int64{"c/claimed": 2000}, o.counts())
	}},

	{"CompletePublishesAndRetries", func(t *testing.T, o *outbox) {
		const delay = 500 * time.Millisecond
		ids := o.write(msg("t"), msg("t"), msg("t"))
		pub, failed, outage := ids[0], ids[1], ids[2]
		token, envs := o.claim(3, time.Minute)
		require.Len(t, envs, 3)

		res, err := o.d.Store.Complete(o.ctx(), herald.CompleteParams{Token: token})
		require.NoError(t, err)
		require.Zero(t, res.Published+len(res.Failed), "an empty acknowledgement changes nothing")

		// The database's clock when the rows were claimed: the lease ends
		// a minute after it.
		lease := o.get(failed).LeaseUntil
		require.NotNil(t, lease)
		claimedAt := lease.Add(-time.Minute)
		completing := time.Now()
		res = o.complete(herald.CompleteParams{Token: token, Published: []string{pub}, Failed: []herald.Failure{
			{ID: failed, Outcome: herald.OutcomeRetry, Error: "broker said no", Delay: delay},
			{ID: outage, Outcome: herald.OutcomeOutage, Error: "connection refused", Delay: delay},
		}})
		require.Equal(t, 1, res.Published)
		require.ElementsMatch(t, []string{failed, outage}, res.Failed)
		// The database's clock after Complete: a row written now is created
		// at it. It waits an hour, out of the way of the claims below.
		probe := msg("probe")
		probe.AvailableAt = time.Now().Add(time.Hour)
		completedBy := o.get(o.write(probe)[0]).CreatedAt

		ev := o.get(pub)
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
			ev := o.get(f.id)
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

		_, early := o.claim(10, time.Minute)
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

	{"PermanentFailureIsDead", func(t *testing.T, o *outbox) {
		ids := o.write(msg("t"), msg("t"))
		token, _ := o.claim(2, time.Minute)
		res := o.complete(herald.CompleteParams{Token: token, Published: ids[1:],
			Failed: []herald.Failure{{ID: ids[0], Outcome: herald.OutcomeDead, Error: "message too large"}}})
		require.Equal(t, ids[:1], res.Failed)
		require.Equal(t, 1, res.Published)

		ev := o.get(ids[0])
		require.Equal(t, heraldadmin.StateDead, ev.State)
		require.NotNil(t, ev.DeadAt)
		require.Nil(t, ev.LeaseUntil)
		require.Equal(t, 1, ev.Attempt, "on its first attempt, far from MaxAttempts")
		require.Equal(t, "message too large", ev.LastError)
		require.Equal(t, ids[:1], rowIDs(o.list(heraldadmin.EventFilter{All: true})))
		_, envs := o.claim(10, time.Minute)
		require.Empty(t, envs, "dead rows are not claimed")
	}},

	{"OutcomesAreWrittenAsDecided", func(t *testing.T, o *outbox) {
		// The relay decides each outcome (see herald's decide); the store
		// writes it: state, attempt refund, last_error, parking.
		outcomes := []herald.Outcome{herald.OutcomeRetry, herald.OutcomeOutage, herald.OutcomeHeldBack,
			herald.OutcomeReleased, herald.OutcomeDead, herald.OutcomeParked}
		msgs := make([]herald.Message, len(outcomes))
		for i := range msgs {
			msgs[i] = msg("t")
			msgs[i].Key = fmt.Sprintf("k%d", i)
		}
		ids := o.write(msgs...)
		token, envs := o.claim(len(ids), time.Minute)
		require.Len(t, envs, len(ids))
		failed := make([]herald.Failure, len(ids))
		for i, out := range outcomes {
			failed[i] = herald.Failure{ID: ids[i], Outcome: out, Error: "said " + string(out)}
		}
		require.ElementsMatch(t, ids, o.complete(herald.CompleteParams{Token: token, Failed: failed}).Failed)
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
			ev := o.get(ids[i])
			require.Equal(t, want.state, ev.State, outcomes[i])
			require.Equal(t, want.attempt, ev.Attempt, outcomes[i])
			require.Equal(t, want.lastError, ev.LastError, outcomes[i])
			require.Equal(t, want.parked, ev.Parked, outcomes[i])
			require.Nil(t, ev.LeaseUntil, outcomes[i])
			require.Equal(t, want.state == heraldadmin.StateDead, ev.DeadAt != nil, outcomes[i])
		}
	}},

	{"TokenCheckedAckAfterLeaseLossChangesNothing", func(t *testing.T, o *outbox) {
		ids := o.write(msg("t"), msg("t"))
		tokenA := uuid.NewString()
		require.Len(t, o.claimWith(tokenA, 10, 100*time.Millisecond), 2)
		rescued := 0
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := o.d.Store.RescueExpired(o.ctx(), 10)
			require.NoError(c, err)
			rescued += n
			require.Equal(c, 2, rescued)
		}, waitFor, 20*time.Millisecond)
		// Another relay claims the rows. A, back from a pause, acknowledges.
		tokenB := uuid.NewString()
		envs, err := o.d.Store.Claim(o.ctx(), herald.ClaimParams{Token: tokenB, Owner: "relay-b", Limit: 10, Lease: time.Hour})
		require.NoError(t, err)
		require.ElementsMatch(t, ids, envIDs(envs))

		res := o.complete(herald.CompleteParams{Token: tokenA, Published: ids[:1],
			Failed: []herald.Failure{{ID: ids[1], Outcome: herald.OutcomeParked, Error: "late from A"}}})
		require.Zero(t, res.Published+len(res.Failed), "%+v", res)
		res = o.complete(herald.CompleteParams{Token: tokenA, Published: ids})
		require.Zero(t, res.Published)
		res = o.complete(herald.CompleteParams{Token: tokenA, Failed: []herald.Failure{{ID: ids[0], Outcome: herald.OutcomeRetry, Error: "late from A"}}})
		require.Empty(t, res.Failed)
		res = o.complete(herald.CompleteParams{Token: tokenA, Failed: released(ids...)})
		require.Empty(t, res.Failed)

		for _, id := range ids {
			ev := o.get(id)
			require.Equal(t, heraldadmin.StateClaimed, ev.State, "still B's")
			require.Equal(t, "relay-b", ev.ClaimedBy)
			require.Equal(t, 2, ev.Attempt)
			require.NotEqual(t, "late from A", ev.LastError)
			require.Nil(t, ev.DeadAt)
		}
		require.Zero(t, o.rescue(10), "B's lease runs")
		res = o.complete(herald.CompleteParams{Token: tokenB, Published: ids})
		require.Equal(t, 2, res.Published, "the owner's acknowledgement still works")
	}},

	{"ReleasedRowsReturnAtOnceWithAttemptRefunded", func(t *testing.T, o *outbox) {
		ids := o.write(msg("t"), msg("t"), msg("t"))
		token, envs := o.claim(3, time.Hour)
		require.Len(t, envs, 3)

		res := o.complete(herald.CompleteParams{Token: token, Failed: released(ids[:2]...)})
		require.ElementsMatch(t, ids[:2], res.Failed)
		for _, id := range ids[:2] {
			ev := o.get(id)
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Zero(t, ev.Attempt, "the released claim does not count")
			require.Nil(t, ev.LeaseUntil)
		}
		ev := o.get(ids[2])
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
			res := o.complete(herald.CompleteParams{Token: tc.token, Failed: released(tc.ids...)})
			require.Empty(t, res.Failed)
		}
		_, again := o.claim(10, time.Minute)
		require.Equal(t, ids[:2], envIDs(again), "claimable at once")
		for _, e := range again {
			require.Equal(t, 1, e.Attempt)
		}
	}},

	{"RescuerReturnsExpiredLeasesOnly", func(t *testing.T, o *outbox) {
		long := o.put(heraldadmin.StateClaimed, msg("long"))
		short := o.write(msg("short"))
		require.Len(t, o.claimWith(uuid.NewString(), 1, 50*time.Millisecond), 1)
		rescued := 0
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			n, err := o.d.Store.RescueExpired(o.ctx(), 10)
			require.NoError(c, err)
			rescued += n
			require.NotZero(c, rescued)
		}, waitFor, 20*time.Millisecond)
		require.Equal(t, 1, rescued, "the expired lease only")
		require.Zero(t, o.rescue(10))

		ev := o.get(long[0])
		require.Equal(t, heraldadmin.StateClaimed, ev.State, "a running lease is not rescued")
		require.NotNil(t, ev.LeaseUntil)
		ev = o.get(short[0])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Nil(t, ev.LeaseUntil)
		_, envs := o.claim(10, time.Minute)
		require.Equal(t, short, envIDs(envs), "claimable at once")
		// The relay that lost the lease may have published before it died:
		// the attempt counted, so a message that kills every relay trying it
		// still runs out of attempts.
		require.Equal(t, 2, envs[0].Attempt)
	}},

	{"RescueExpiredHonoursItsLimit", func(t *testing.T, o *outbox) {
		ids := o.write(msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))
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
		require.Equal(t, map[string]int64{"t/ready": int64(len(ids))}, o.counts())
	}},

	{"RequeueAndDiscardByIDTopicAndAll", func(t *testing.T, o *outbox) {
		a := o.put(heraldadmin.StateDead, msg("a"), msg("a"), msg("a"))
		b := o.put(heraldadmin.StateDead, msg("b"), msg("b"))
		c := o.put(heraldadmin.StateDead, msg("c"), msg("c"))
		o.put(heraldadmin.StatePublished, msg("a"))
		readyA := o.write(msg("a"))

		require.Equal(t, slices.Concat(a, b, c), rowIDs(o.list(heraldadmin.EventFilter{All: true})), "dead rows by default, in write order")
		require.Equal(t, a[:2], rowIDs(o.list(heraldadmin.EventFilter{All: true, Limit: 2})))
		require.Equal(t, a, rowIDs(o.list(heraldadmin.EventFilter{Topic: "a"})))
		require.Equal(t, []string{a[0], b[1]}, rowIDs(o.list(heraldadmin.EventFilter{IDs: []string{b[1], readyA[0], a[0]}})))
		require.Equal(t, readyA, rowIDs(o.list(heraldadmin.EventFilter{Topic: "a", State: heraldadmin.StateReady})))

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
		require.Equal(t, 1, requeue(heraldadmin.EventFilter{IDs: a[:1]}))
		ev := o.get(a[0])
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Zero(t, ev.Attempt, "requeue resets the attempts")
		require.Nil(t, ev.DeadAt)
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
		require.Equal(t, counts, o.counts())
		_, envs := o.claim(10, time.Minute)
		require.ElementsMatch(t, []string{a[0], b[0], b[1], readyA[0]}, envIDs(envs))
		for _, e := range envs {
			require.Equal(t, 1, e.Attempt)
		}

		// Refusals. Each filter is exactly one of IDs, Topic, All, and ids
		// are UUIDs: anything else is an error and changes nothing.
		d := o.put(heraldadmin.StateDead, msg("d"))
		counts = o.counts()
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
		_, err := o.d.Admin.GetEvent(o.ctx(), "not-a-uuid")
		require.Error(t, err)
		require.Equal(t, counts, o.counts())
	}},

	{"RetentionRemovesOnlyOldPublished", func(t *testing.T, o *outbox) {
		old := o.put(heraldadmin.StatePublished, msg("t"), msg("t"), msg("t"), msg("t"), msg("t"))
		recent := o.put(heraldadmin.StatePublished, msg("t"))
		dead := o.put(heraldadmin.StateDead, msg("t"))
		// Written long ago but published just now: retention counts from
		// publication.
		lateID := o.write(msg("t"))
		o.backdate(48*time.Hour, lateID...)
		o.settle(heraldadmin.StatePublished, lateID)
		ready := o.write(msg("t"))
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
			o.get(id)
		}
		require.Equal(t, map[string]int64{"t/published": 2, "t/dead": 1, "t/ready": 1}, o.counts())
	}},

	{"StatusCountsByTopicAndState", func(t *testing.T, o *outbox) {
		st, err := o.d.Admin.Status(o.ctx())
		require.NoError(t, err)
		require.Empty(t, st.Topics, "an empty outbox")
		require.Zero(t, st.OldestPending)

		o.put(heraldadmin.StateDead, msg("orders"))
		o.put(heraldadmin.StatePublished, msg("orders"), msg("orders"))
		held := o.put(heraldadmin.StateClaimed, msg("orders"))
		ready := o.write(msg("orders"), msg("orders"), msg("orders"), msg("payments"), msg("payments"))
		o.backdate(30*time.Minute, held...)
		o.backdate(time.Hour, ready[1])

		st, err = o.d.Admin.Status(o.ctx())
		require.NoError(t, err)
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

	{"OldestPendingCountsReadyAndClaimedRowsOnly", func(t *testing.T, o *outbox) {
		dead := o.put(heraldadmin.StateDead, msg("t"))
		published := o.put(heraldadmin.StatePublished, msg("t"))
		held := o.put(heraldadmin.StateClaimed, msg("t"))
		ready := o.write(msg("t"))
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

	{"MigrateAgainKeepsEverything", func(t *testing.T, o *outbox) {
		ids := o.write(msg("t"), msg("t"))
		for range 2 {
			require.NoError(t, o.d.Store.Migrate(o.ctx()))
		}
		require.NoError(t, o.d.Store.Ping(o.ctx()))
		require.Equal(t, ids, rowIDs(o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})))
	}},

	{"RelayPublishesEverythingOnce", func(t *testing.T, o *outbox) {
		ids := o.writeN("relay", 500)
		var (
			mu        sync.Mutex
			delivered = make(map[string]int, len(ids))
			retried   []string
		)
		pub := herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range batch {
				delivered[e.ID]++
				if e.Attempt != 1 {
					retried = append(retried, e.ID)
				}
			}
			return nil
		})
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: o.d.Store, Publisher: pub, Owner: o.owner,
			Logger:    slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			BatchSize: 50, MaxInFlight: 4, PollInterval: 2 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
			Lease: 10 * time.Second, PublishTimeout: 5 * time.Second,
		})
		require.NoError(t, err)
		stop := func() error {
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			return relay.Stop(ctx)
		}
		require.NoError(t, relay.Start(o.ctx()))
		t.Cleanup(func() { _ = stop() }) // when an assertion below fails first

		require.EventuallyWithT(t, func(c *assert.CollectT) {
			st, err := o.d.Admin.Status(o.ctx())
			require.NoError(c, err)
			require.Equal(c, map[string]int64{"relay/published": int64(len(ids))}, countsOf(st))
		}, waitFor, 10*time.Millisecond, "every event published and acknowledged")
		require.NoError(t, stop())
		require.NoError(t, stop(), "Stop is safe to call twice")

		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			require.Equal(t, 1, delivered[id], "event %s delivered %d times", id, delivered[id])
		}
		require.Len(t, delivered, len(ids))
		require.Empty(t, retried, "no event needed a second attempt")
		stats := relay.Stats()
		require.EqualValues(t, len(ids), stats.Claimed)
		require.EqualValues(t, len(ids), stats.Published)
		require.Zero(t, stats.Retried+stats.Dead+stats.Released+stats.Rescued)
	}},
}

// outbox is one case's driver with the helpers cases share. Helpers fail the
// test on any error, so they are for the test's goroutine only; the try*
// variants return errors for other goroutines and polled conditions.
type outbox struct {
	t     *testing.T
	d     *Driver
	owner string // claimed_by of the suite's claims
}

func (o *outbox) ctx() context.Context { return o.t.Context() }

func (d *Driver) payloadCap() int {
	if d.MaxPayloadBytes > 0 {
		return d.MaxPayloadBytes
	}
	return herald.DefaultMaxPayloadBytes
}

// msg returns a message on topic with a fresh id.
func msg(topic string) herald.Message {
	return herald.Message{ID: herald.NewID(), Topic: topic, Payload: []byte(`{"suite":true}`)}
}

// write commits msgs in one transaction and returns their ids, generating
// the ids left empty.
func (o *outbox) write(msgs ...herald.Message) []string {
	o.t.Helper()
	msgs = slices.Clone(msgs)
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = herald.NewID()
		}
		ids[i] = strings.ToLower(msgs[i].ID)
	}
	require.NoError(o.t, o.d.Write(o.ctx(), msgs, true))
	return ids
}

// writeN commits n messages on topic, in transactions of up to 500.
func (o *outbox) writeN(topic string, n int) []string {
	o.t.Helper()
	var ids []string
	for n > 0 {
		batch := make([]herald.Message, min(n, 500))
		for i := range batch {
			batch[i] = msg(topic)
		}
		ids = append(ids, o.write(batch...)...)
		n -= len(batch)
	}
	return ids
}

// claim claims with a fresh token, which it returns.
func (o *outbox) claim(limit int, lease time.Duration) (string, []herald.Envelope) {
	o.t.Helper()
	token := uuid.NewString()
	return token, o.claimWith(token, limit, lease)
}

func (o *outbox) claimWith(token string, limit int, lease time.Duration) []herald.Envelope {
	o.t.Helper()
	envs, err := o.tryClaim(token, limit, lease)
	require.NoError(o.t, err)
	return envs
}

// tryClaim claims and checks what every claim promises: at most limit
// envelopes, in write (seq) order, each counting its attempt.
func (o *outbox) tryClaim(token string, limit int, lease time.Duration) ([]herald.Envelope, error) {
	envs, err := o.d.Store.Claim(o.ctx(), herald.ClaimParams{Token: token, Owner: o.owner, Limit: limit, Lease: lease})
	if err != nil {
		return nil, err
	}
	if len(envs) > limit {
		return nil, fmt.Errorf("claim of limit %d returned %d envelopes", limit, len(envs))
	}
	if !slices.IsSortedFunc(envs, func(a, b herald.Envelope) int { return cmp.Compare(a.Seq, b.Seq) }) {
		return nil, errors.New("claimed envelopes are not sorted by seq")
	}
	for _, e := range envs {
		if e.Attempt < 1 {
			return nil, fmt.Errorf("claimed envelope %s has attempt %d", e.ID, e.Attempt)
		}
	}
	return envs, nil
}

// complete acknowledges.
func (o *outbox) complete(p herald.CompleteParams) herald.CompleteResult {
	o.t.Helper()
	res, err := o.d.Store.Complete(o.ctx(), p)
	require.NoError(o.t, err)
	return res
}

// put writes msgs and moves them to state. Claiming is the only way there,
// so no other row may be ready when put runs: it checks.
func (o *outbox) put(state heraldadmin.State, msgs ...herald.Message) []string {
	o.t.Helper()
	ids := o.write(msgs...)
	o.settle(state, ids)
	return ids
}

// settle moves ready rows to state: claimed (for an hour), published or
// dead. No other row may be ready.
func (o *outbox) settle(state heraldadmin.State, ids []string) {
	o.t.Helper()
	if len(ids) == 0 || state == heraldadmin.StateReady {
		return
	}
	token, envs := o.claim(len(ids)+1, time.Hour)
	require.ElementsMatch(o.t, ids, envIDs(envs), "settle found other ready rows")
	switch state {
	case heraldadmin.StateClaimed:
	case heraldadmin.StatePublished:
		require.Equal(o.t, len(ids), o.complete(herald.CompleteParams{Token: token, Published: ids}).Published)
	case heraldadmin.StateDead:
		failed := make([]herald.Failure, len(ids))
		for i, id := range ids {
			failed[i] = herald.Failure{ID: id, Outcome: herald.OutcomeDead, Error: "made dead by the suite"}
		}
		require.ElementsMatch(o.t, ids, o.complete(herald.CompleteParams{Token: token, Failed: failed}).Failed)
	default:
		o.t.Fatalf("settle: unknown state %q", state)
	}
}

func (o *outbox) backdate(d time.Duration, ids ...string) {
	o.t.Helper()
	for _, id := range ids {
		require.NoError(o.t, o.d.Backdate(o.ctx(), id, d))
	}
}

func (o *outbox) rescue(limit int) int {
	o.t.Helper()
	n, err := o.d.Store.RescueExpired(o.ctx(), limit)
	require.NoError(o.t, err)
	return n
}

func (o *outbox) get(id string) heraldadmin.EventRow {
	o.t.Helper()
	ev, err := o.d.Admin.GetEvent(o.ctx(), id)
	require.NoError(o.t, err)
	return ev
}

// requireGone checks the row does not exist.
func (o *outbox) requireGone(id string) {
	o.t.Helper()
	_, err := o.d.Admin.GetEvent(o.ctx(), id)
	require.ErrorIs(o.t, err, heraldadmin.ErrNotFound, "event %s", id)
}

func (o *outbox) list(f heraldadmin.EventFilter) []heraldadmin.EventRow {
	o.t.Helper()
	rows, err := o.d.Admin.ListEvents(o.ctx(), f)
	require.NoError(o.t, err)
	return rows
}

func (o *outbox) status() heraldadmin.Status {
	o.t.Helper()
	st, err := o.d.Admin.Status(o.ctx())
	require.NoError(o.t, err)
	return st
}

// counts returns the row counts by "topic/state".
func (o *outbox) counts() map[string]int64 {
	o.t.Helper()
	return countsOf(o.status())
}

func countsOf(st heraldadmin.Status) map[string]int64 {
	out := make(map[string]int64, len(st.Topics))
	for _, ts := range st.Topics {
		out[ts.Topic+"/"+string(ts.State)] += ts.Count
	}
	return out
}

func envIDs(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func rowIDs(rows []heraldadmin.EventRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func between(t *testing.T, d, lo, hi time.Duration, what string) {
	t.Helper()
	require.True(t, d >= lo && d < hi, "%s: %v, want in [%v, %v)", what, d, lo, hi)
}
