package heralddrivertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// Exercise runs the whole suite against the driver h builds. Every case
// runs in parallel on an outbox of its own.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if reason, skip := h.Skip[c.name]; skip {
				t.Skip(reason)
			}
			c.run(t, h.New(t))
		})
	}
}

type testCase struct {
	name string
	run  func(t *testing.T, d *Driver)
}

var policy = herald.RetryPolicy{Base: time.Second, Cap: time.Minute, MaxAttempts: 3, MaxAge: time.Hour}

// cases is the suite. Names are stable: drivers refer to them in Skip.
var cases = []testCase{
	{"WriteThenCommitMakesRowsReady", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"), msg("b"))
		for _, id := range ids {
			require.Equal(t, herald.StateReady, get(t, d, id).State)
		}
		require.Equal(t, 2, count(t, d, herald.StateReady))
	}},
	{"WriteThenRollbackLeavesNothing", func(t *testing.T, d *Driver) {
		m := msg("gone")
		m.ID = herald.NewID()
		require.NoError(t, d.Write(ctx(t), []herald.Message{m}, false))
		_, err := d.Admin.GetEvent(ctx(t), m.ID)
		require.ErrorIs(t, err, herald.ErrNotFound)
		require.Empty(t, claim(t, d, "t1", 10, time.Minute))
	}},
	{"InvalidMessageWritesNothing", func(t *testing.T, d *Driver) {
		err := d.Write(ctx(t), []herald.Message{msg("ok"), {Topic: ""}}, true)
		var ve *herald.ValidationError
		require.True(t, errors.As(err, &ve), "got %v", err)
		require.Equal(t, 1, ve.Index)
		require.Zero(t, total(t, d))
	}},
	{"HeadersAndFieldsRoundTrip", func(t *testing.T, d *Driver) {
		payload := make([]byte, 256)
		for i := range payload {
			payload[i] = byte(i)
		}
		m := herald.Message{
			Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			Payload: payload, Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		}
		id := write(t, d, m)[0]
		envs := claim(t, d, uuid.NewString(), 10, time.Minute)
		require.Len(t, envs, 1)
		for _, got := range []herald.Message{envs[0].Message, get(t, d, id).Message} {
			require.Equal(t, id, got.ID)
			require.Equal(t, m.Topic, got.Topic)
			require.Equal(t, "42", got.Key, "the key defaults to the aggregate id")
			require.Equal(t, m.Type, got.Type)
			require.Equal(t, m.AggregateType, got.AggregateType)
			require.Equal(t, m.AggregateID, got.AggregateID)
			require.Equal(t, payload, got.Payload)
			require.Equal(t, m.Headers, got.Headers)
		}
		require.WithinDuration(t, time.Now(), envs[0].CreatedAt, time.Minute)
	}},
	{"LargePayloadAtTheCap", func(t *testing.T, d *Driver) {
		limit := d.MaxPayloadBytes
		if limit == 0 {
			limit = herald.DefaultMaxPayloadBytes
		}
		big := bytes.Repeat([]byte{0xab, 0x00, 'x'}, limit/3+1)[:limit]
		id := write(t, d, herald.Message{Topic: "big", Payload: big})[0]
		require.Equal(t, big, get(t, d, id).Payload)
		err := d.Write(ctx(t), []herald.Message{{Topic: "big", Payload: append(big, 1)}}, true)
		require.ErrorIs(t, err, herald.ErrInvalidMessage)
		require.Equal(t, 1, total(t, d))
	}},
	{"ClaimReturnsOnlyReadyRows", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"), msg("b"), msg("c"), msg("d"), msg("e"), msg("f"))
		future := msg("later")
		future.AvailableAt = time.Now().Add(time.Hour)
		write(t, d, future)
		// ids[0] published, ids[1] dead, ids[2] claimed by someone else.
		first := claim(t, d, "", 3, time.Minute)
		require.Equal(t, ids[:3], idsOf(first), "oldest first, in write order")
		complete(t, d, first, ids[0:1], []herald.Failure{{ID: ids[1], Error: "x", Permanent: true}})
		got := claim(t, d, "", 2, time.Minute)
		require.Equal(t, ids[3:5], idsOf(got), "limit respected, claimed rows skipped")
		for _, e := range got {
			require.Equal(t, 1, e.Attempt)
		}
		got = claim(t, d, "", 10, time.Minute)
		require.Equal(t, ids[5:6], idsOf(got), "neither published, dead, claimed nor delayed rows")
	}},
	{"DelayedMessagesWaitForAvailableAt", func(t *testing.T, d *Driver) {
		soon, later := msg("soon"), msg("later")
		soon.AvailableAt = time.Now().Add(300 * time.Millisecond)
		later.AvailableAt = time.Now().Add(time.Hour)
		ids := write(t, d, soon, later)
		require.Empty(t, claim(t, d, "", 10, time.Minute))
		require.Eventually(t, func() bool {
			return len(claim(t, d, "", 10, time.Minute)) == 1
		}, 10*time.Second, 20*time.Millisecond)
		require.Equal(t, herald.StateClaimed, get(t, d, ids[0]).State)
		require.Equal(t, herald.StateReady, get(t, d, ids[1]).State)
	}},
	{"ConcurrentClaimersNeverGetTheSameRow", func(t *testing.T, d *Driver) {
		var all []string
		for range 4 {
			batch := make([]herald.Message, 500)
			for i := range batch {
				batch[i] = msg("c")
			}
			all = append(all, write(t, d, batch...)...)
		}
		var (
			mu  sync.Mutex
			got = map[string]int{}
			wg  sync.WaitGroup
		)
		for range 8 {
			wg.Go(func() {
				for {
					envs, err := d.Store.Claim(context.Background(), herald.ClaimParams{
						Token: uuid.NewString(), Owner: "suite", Limit: 50, Lease: time.Minute})
					if err != nil {
						t.Error(err)
						return
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
		require.Len(t, got, len(all))
		for id, n := range got {
			require.Equal(t, 1, n, "row %s claimed %d times", id, n)
		}
	}},
	{"CompletePublishesAndRetries", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"), msg("b"), msg("c"))
		envs := claim(t, d, "", 3, time.Minute)
		res := complete(t, d, envs, ids[:1], []herald.Failure{
			{ID: ids[1], Error: "broker said no", Delay: 400 * time.Millisecond},
			{ID: ids[2], Error: "unreachable", Delay: 400 * time.Millisecond, Outage: true},
		})
		require.Equal(t, herald.CompleteResult{Published: 1, Retried: 2}, res)
		ev := get(t, d, ids[0])
		require.Equal(t, herald.StatePublished, ev.State)
		require.NotNil(t, ev.PublishedAt)
		ev = get(t, d, ids[1])
		require.Equal(t, herald.StateReady, ev.State)
		require.Equal(t, 1, ev.Attempt, "a failure keeps its attempt")
		require.Equal(t, "broker said no", ev.LastError)
		require.Equal(t, 0, get(t, d, ids[2]).Attempt, "an outage refunds the attempt")
		require.Empty(t, claim(t, d, "", 10, time.Minute), "not claimable before the backoff ends")
		require.Eventually(t, func() bool {
			return len(claim(t, d, "", 10, time.Minute)) > 0
		}, 10*time.Second, 20*time.Millisecond, "claimable after it")
	}},
	{"PermanentFailureIsDead", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"))
		res := complete(t, d, claim(t, d, "", 1, time.Minute), nil, []herald.Failure{{ID: ids[0], Error: "too large", Permanent: true}})
		require.Equal(t, ids, res.Dead)
		ev := get(t, d, ids[0])
		require.Equal(t, herald.StateDead, ev.State)
		require.NotNil(t, ev.DeadAt)
		require.Equal(t, "too large", ev.LastError)
	}},
	{"DeadAfterMaxAttempts", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"))
		p := policy
		p.MaxAttempts = 2
		for attempt := 1; attempt <= 2; attempt++ {
			envs := claim(t, d, "", 1, time.Minute)
			require.Len(t, envs, 1)
			require.Equal(t, attempt, envs[0].Attempt)
			res, err := d.Store.Complete(ctx(t), herald.CompleteParams{Token: tokenOf(t, d, ids[0]), Policy: p,
				Failed: []herald.Failure{{ID: ids[0], Error: "no"}}})
			require.NoError(t, err)
			if attempt == 1 {
				require.Equal(t, 1, res.Retried)
			} else {
				require.Equal(t, ids, res.Dead)
			}
		}
		require.Equal(t, herald.StateDead, get(t, d, ids[0]).State)
	}},
	{"DeadAfterMaxAge", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"))
		require.NoError(t, d.Backdate(ctx(t), ids[0], 2*time.Hour))
		res := complete(t, d, claim(t, d, "", 1, time.Minute), nil, []herald.Failure{{ID: ids[0], Error: "no"}})
		require.Equal(t, ids, res.Dead, "MaxAge is 1h")
	}},
	{"TokenCheckedAckAfterLeaseLossChangesNothing", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"))
		tokenA := uuid.NewString()
		require.Len(t, claimWith(t, d, tokenA, 1, 100*time.Millisecond), 1)
		require.Eventually(t, func() bool {
			n, err := d.Store.RescueExpired(ctx(t), 10)
			require.NoError(t, err)
			return n == 1
		}, 10*time.Second, 20*time.Millisecond)
		tokenB := uuid.NewString()
		require.Len(t, claimWith(t, d, tokenB, 1, time.Minute), 1)

		res, err := d.Store.Complete(ctx(t), herald.CompleteParams{Token: tokenA, Published: ids, Policy: policy})
		require.NoError(t, err)
		require.Zero(t, res.Published)
		res, err = d.Store.Complete(ctx(t), herald.CompleteParams{Token: tokenA, Policy: policy,
			Failed: []herald.Failure{{ID: ids[0], Error: "late", Permanent: true}}})
		require.NoError(t, err)
		require.Equal(t, herald.CompleteResult{}, res)
		n, err := d.Store.Release(ctx(t), tokenA, ids)
		require.NoError(t, err)
		require.Zero(t, n)

		ev := get(t, d, ids[0])
		require.Equal(t, herald.StateClaimed, ev.State)
		require.Equal(t, "suite", ev.ClaimedBy)
		res, err = d.Store.Complete(ctx(t), herald.CompleteParams{Token: tokenB, Published: ids, Policy: policy})
		require.NoError(t, err)
		require.Equal(t, 1, res.Published, "the owner's acknowledgement still works")
	}},
	{"ReleaseReturnsRowsAtOnceWithAttemptRefunded", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"), msg("b"))
		tok := uuid.NewString()
		require.Len(t, claimWith(t, d, tok, 2, time.Hour), 2)
		n, err := d.Store.Release(ctx(t), tok, ids)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		envs := claim(t, d, "", 10, time.Minute)
		require.Len(t, envs, 2, "released rows are claimable at once")
		for _, e := range envs {
			require.Equal(t, 1, e.Attempt, "the released claim did not count")
		}
	}},
	{"RescuerReturnsExpiredLeasesOnly", func(t *testing.T, d *Driver) {
		write(t, d, msg("short"))
		require.Len(t, claimWith(t, d, uuid.NewString(), 1, 50*time.Millisecond), 1)
		write(t, d, msg("long"))
		require.Len(t, claimWith(t, d, uuid.NewString(), 1, time.Hour), 1)
		require.Eventually(t, func() bool {
			n, err := d.Store.RescueExpired(ctx(t), 10)
			require.NoError(t, err)
			return n == 1
		}, 10*time.Second, 20*time.Millisecond)
		got := claim(t, d, "", 10, time.Minute)
		require.Len(t, got, 1)
		require.Equal(t, "short", got[0].Topic)
		require.Equal(t, 2, got[0].Attempt, "a rescued claim counted")
	}},
	{"RequeueAndDiscardByIDTopicAndAll", func(t *testing.T, d *Driver) {
		var ids []string
		for _, topic := range []string{"a", "a", "a", "b", "b", "c"} {
			ids = append(ids, write(t, d, msg(topic))...)
		}
		var fails []herald.Failure
		for _, id := range ids {
			fails = append(fails, herald.Failure{ID: id, Error: "x", Permanent: true})
		}
		complete(t, d, claim(t, d, "", 10, time.Minute), nil, fails)
		require.Equal(t, 6, count(t, d, herald.StateDead))

		n, err := d.Admin.RequeueDead(ctx(t), herald.EventFilter{IDs: ids[:1]})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = d.Admin.RequeueDead(ctx(t), herald.EventFilter{Topic: "a"})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		got := claim(t, d, "", 10, time.Minute)
		require.Len(t, got, 3)
		for _, e := range got {
			require.Equal(t, 1, e.Attempt, "requeue resets attempts")
		}
		n, err = d.Admin.DiscardDead(ctx(t), herald.EventFilter{Topic: "b"})
		require.NoError(t, err)
		require.Equal(t, 2, n)
		n, err = d.Admin.DiscardDead(ctx(t), herald.EventFilter{All: true})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Zero(t, count(t, d, herald.StateDead))
		_, err = d.Admin.GetEvent(ctx(t), ids[3])
		require.ErrorIs(t, err, herald.ErrNotFound)

		for _, f := range []herald.EventFilter{{}, {Topic: "a", All: true}, {IDs: []string{"not-a-uuid"}}} {
			_, err := d.Admin.RequeueDead(ctx(t), f)
			require.Error(t, err, "%+v", f)
			_, err = d.Admin.DiscardDead(ctx(t), f)
			require.Error(t, err, "%+v", f)
		}
	}},
	{"RetentionRemovesOnlyOldPublished", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("old"), msg("old"), msg("old"), msg("new"), msg("dead"), msg("ready"))
		envs := claim(t, d, "", 5, time.Minute)
		complete(t, d, envs, ids[:4], []herald.Failure{{ID: ids[4], Error: "x", Permanent: true}})
		for _, id := range []string{ids[0], ids[1], ids[2], ids[4], ids[5]} {
			require.NoError(t, d.Backdate(ctx(t), id, 48*time.Hour))
		}
		n, err := d.Store.DeletePublished(ctx(t), 24*time.Hour, 2)
		require.NoError(t, err)
		require.Equal(t, 2, n, "the limit holds per call")
		n, err = d.Store.DeletePublished(ctx(t), 24*time.Hour, 2)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		n, err = d.Store.DeletePublished(ctx(t), 24*time.Hour, 2)
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, 1, count(t, d, herald.StatePublished), "the recent one stays")
		require.Equal(t, 1, count(t, d, herald.StateDead), "dead rows stay")
		require.Equal(t, 1, count(t, d, herald.StateReady))
	}},
	{"StatusCountsByTopicAndState", func(t *testing.T, d *Driver) {
		ids := write(t, d, msg("a"), msg("a"), msg("b"))
		require.NoError(t, d.Backdate(ctx(t), ids[0], time.Hour))
		st, err := d.Admin.Status(ctx(t))
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"a/ready/2", "b/ready/1"}, summary(st))
		require.Greater(t, st.OldestPending, 59*time.Minute)
		require.Less(t, st.OldestPending, 2*time.Hour)
	}},
	{"RelayPublishesEverythingOnce", func(t *testing.T, d *Driver) {
		var ids []string
		for range 5 {
			batch := make([]herald.Message, 100)
			for i := range batch {
				batch[i] = msg("relay")
			}
			ids = append(ids, write(t, d, batch...)...)
		}
		var (
			mu  sync.Mutex
			got = map[string]int{}
		)
		relay, err := herald.NewRelay(&herald.RelayConfig{
			Store: d.Store, Logger: slog.New(slog.DiscardHandler), BatchSize: 64, PollInterval: time.Millisecond,
			Publisher: herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
				mu.Lock()
				defer mu.Unlock()
				for _, e := range batch {
					got[e.ID]++
				}
				return nil
			}),
		})
		require.NoError(t, err)
		require.NoError(t, relay.Start(ctx(t)))
		require.Eventually(t, func() bool { return count(t, d, herald.StatePublished) == len(ids) }, 30*time.Second, 10*time.Millisecond)
		require.NoError(t, relay.Stop(ctx(t)))
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, len(ids))
		for id, n := range got {
			require.Equal(t, 1, n, "event %s published %d times", id, n)
		}
	}},
}

func ctx(t *testing.T) context.Context { return t.Context() }

func msg(topic string) herald.Message {
	return herald.Message{Topic: topic, Payload: []byte(`{"suite":true}`)}
}

// write commits msgs, giving each an id first, and returns the ids.
func write(t *testing.T, d *Driver, msgs ...herald.Message) []string {
	t.Helper()
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = herald.NewID()
		}
		ids[i] = msgs[i].ID
	}
	require.NoError(t, d.Write(ctx(t), msgs, true))
	return ids
}

// claim claims with a fresh token.
func claim(t *testing.T, d *Driver, _ string, limit int, lease time.Duration) []herald.Envelope {
	t.Helper()
	return claimWith(t, d, uuid.NewString(), limit, lease)
}

func claimWith(t *testing.T, d *Driver, token string, limit int, lease time.Duration) []herald.Envelope {
	t.Helper()
	envs, err := d.Store.Claim(ctx(t), herald.ClaimParams{Token: token, Owner: "suite", Limit: limit, Lease: lease})
	require.NoError(t, err)
	for _, e := range envs {
		tokens.Store(e.ID, token)
	}
	require.True(t, slices.IsSortedFunc(envs, func(a, b herald.Envelope) int { return int(a.Seq - b.Seq) }), "claims come in write order")
	return envs
}

// tokenOf returns the token of the suite's latest claim of a row: the suite
// reads no columns, so claims record their tokens.
func tokenOf(t *testing.T, d *Driver, id string) string {
	t.Helper()
	tok, ok := tokens.Load(id)
	require.True(t, ok, "no claim recorded for %s", id)
	return tok.(string)
}

// tokens maps claimed row ids to the token of their latest claim.
var tokens sync.Map

// complete acknowledges envs: published ids confirmed, failures as given.
// Every envelope must come from one claim.
func complete(t *testing.T, d *Driver, envs []herald.Envelope, published []string, failed []herald.Failure) herald.CompleteResult {
	t.Helper()
	require.NotEmpty(t, envs)
	tok := tokenOf(t, d, envs[0].ID)
	res, err := d.Store.Complete(ctx(t), herald.CompleteParams{Token: tok, Published: published, Failed: failed, Policy: policy})
	require.NoError(t, err)
	return res
}

func idsOf(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func get(t *testing.T, d *Driver, id string) herald.EventRow {
	t.Helper()
	ev, err := d.Admin.GetEvent(ctx(t), id)
	require.NoError(t, err)
	return ev
}

func count(t *testing.T, d *Driver, state herald.State) int {
	t.Helper()
	st, err := d.Admin.Status(ctx(t))
	require.NoError(t, err)
	n := 0
	for _, ts := range st.Topics {
		if ts.State == state {
			n += int(ts.Count)
		}
	}
	return n
}

func total(t *testing.T, d *Driver) int {
	t.Helper()
	st, err := d.Admin.Status(ctx(t))
	require.NoError(t, err)
	n := 0
	for _, ts := range st.Topics {
		n += int(ts.Count)
	}
	return n
}

func summary(st herald.Status) []string {
	var out []string
	for _, ts := range st.Topics {
		out = append(out, fmt.Sprintf("%s/%s/%d", ts.Topic, ts.State, ts.Count))
	}
	return out
}
