package heralddrivertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// relayCases check the relay's guarantees end to end on the driver's store:
// nothing rolled back is published, everything committed is, once; a
// failure is retried, then dead; a relay that dies or loses its lease
// changes nothing that another relay now holds; several relays share the
// work and keep each key's order; Stop releases what it did not publish.
// Guarantees that need a process to die for real stay with heraldpg, whose
// tests re-execute themselves as relay processes.
var relayCases = []testCase{
	{"RelayPublishesEverythingOnce", func(t *testing.T, o *Kit) {
		ids := o.WriteN("relay", 500)
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
			Logger:    Logger(t),
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

	{"RelayNeverPublishesRolledBackEvents", func(t *testing.T, o *Kit) {
		var ghosts []string
		for i := range 200 {
			m := msg("t")
			commit := i%3 != 0
			require.NoError(t, o.d.Write(o.ctx(), []herald.Message{m}, commit))
			if !commit {
				ghosts = append(ghosts, m.ID)
			}
		}
		// A marker written last: once it is delivered, every earlier commit
		// has been claimed too (one relay, one batch at a time, claims in
		// write order).
		marker := o.Write(msg("t"))
		rec := NewRecorder()
		StartRelay(t, o.d.Store, rec, func(c *herald.RelayConfig) { c.MaxInFlight = 1 })
		rec.RequireAllDeliveredOnce(t, marker)
		distinct, dups := rec.Total()
		require.Equal(t, 200-len(ghosts)+1, distinct)
		require.Zero(t, dups)
		for _, id := range ghosts {
			require.Zero(t, rec.Count(id), "ghost %s from a rolled-back transaction was published", id)
		}
	}},

	{"RelayRetriesAFailureWithBackoffAndKeepsAScrubbedError", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"))
		release := make(chan struct{})
		rec := NewRecorder()
		rec.Fail = func(_ herald.Envelope, attempt int) error {
			if attempt == 1 {
				return errBroker
			}
			<-release // hold the second attempt until the row has been inspected
			return nil
		}
		StartRelay(t, o.d.Store, rec, func(c *herald.RelayConfig) {
			c.Retry = herald.RetryPolicy{Base: 400 * time.Millisecond, Cap: time.Second, MaxAttempts: 5, MaxAge: time.Hour}
		})
		letGo := sync.OnceFunc(func() { close(release) })
		t.Cleanup(letGo) // before the relay's Stop, should an assertion fail first

		ev := o.waitRow(ids[0], "a last error", func(ev heraldadmin.EventRow) bool { return ev.LastError != "" })
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Equal(t, 1, ev.Attempt)
		require.Contains(t, ev.LastError, "broker said no")
		require.NotContains(t, ev.LastError, "hunter2", "a secret reached last_error")
		// Equal jitter: the retry is at least half the base delay away.
		wait := ev.AvailableAt.Sub(o.databaseNow())
		require.Greater(t, wait, 100*time.Millisecond, "retry scheduled %v ahead", wait)
		letGo()
		rec.RequireAllDeliveredOnce(t, ids)
		require.Equal(t, 2, o.waitState(ids[0], heraldadmin.StatePublished).Attempt)
	}},

	{"RelayMakesAPermanentFailureDeadAtOnce", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("bad"), msg("good"))
		rec := NewRecorder()
		rec.Fail = func(env herald.Envelope, _ int) error {
			if env.Topic == "bad" {
				return herald.Permanent(errors.New("message too large"))
			}
			return nil
		}
		StartRelay(t, o.d.Store, rec, nil)
		ev := o.waitState(ids[0], heraldadmin.StateDead)
		require.Equal(t, 1, ev.Attempt)
		require.NotNil(t, ev.DeadAt)
		require.Contains(t, ev.LastError, "message too large")
		rec.RequireAllDeliveredOnce(t, ids[1:])
	}},

	{"RelayMakesAnEventDeadAfterMaxAttemptsAndRequeuePublishesIt", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"))
		var healed atomic.Bool
		rec := NewRecorder()
		rec.Fail = func(herald.Envelope, int) error {
			if healed.Load() {
				return nil
			}
			return errBroker
		}
		StartRelay(t, o.d.Store, rec, func(c *herald.RelayConfig) {
			c.Retry = herald.RetryPolicy{Base: time.Millisecond, Cap: 5 * time.Millisecond, MaxAttempts: 3, MaxAge: time.Hour}
		})
		require.Equal(t, 3, o.waitState(ids[0], heraldadmin.StateDead).Attempt)
		require.Zero(t, rec.Count(ids[0]))

		healed.Store(true)
		n, err := o.d.Admin.RequeueDead(o.ctx(), heraldadmin.EventFilter{IDs: ids})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		rec.RequireAllDeliveredOnce(t, ids)
		o.waitState(ids[0], heraldadmin.StatePublished)
	}},

	{"RelayMakesAnEventDeadPastMaxAge", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"))
		o.backdate(2*time.Hour, ids...)
		rec := NewRecorder()
		rec.Fail = func(herald.Envelope, int) error { return errBroker }
		StartRelay(t, o.d.Store, rec, nil) // MaxAttempts 5, MaxAge 1h
		require.Equal(t, 1, o.waitState(ids[0], heraldadmin.StateDead).Attempt)
	}},

	{"OutageSpendsNoAttemptsAndNothingDies", func(t *testing.T, o *Kit) {
		ids := o.writeKeys("t", 300, 50)
		var calls atomic.Int64
		var down atomic.Bool
		down.Store(true)
		inner := NewRecorder()
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			calls.Add(1)
			if down.Load() {
				return errors.New("nats: connection closed")
			}
			return inner.Publish(ctx, batch)
		})
		StartRelay(t, o.d.Store, pub, func(c *herald.RelayConfig) {
			c.Retry = herald.RetryPolicy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 2, MaxAge: time.Hour}
		})
		// Many more failed calls than MaxAttempts allows for one event.
		require.Eventually(t, func() bool { return calls.Load() >= 10 }, 2*waitFor, 5*time.Millisecond)
		down.Store(false)
		inner.RequireAllDeliveredOnce(t, ids)
		o.waitCounts(waitFor, map[string]int64{"t/published": 300})
		for _, ev := range o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StatePublished, Limit: 1000}) {
			require.Equal(t, 1, ev.Attempt, "an outage spent attempts")
		}
	}},

	{"RelayRescuesTheClaimsOfARelayThatDied", func(t *testing.T, o *Kit) {
		ids := o.writeKeys("t", 50, 50)
		// A relay claims and dies: its claim is never acknowledged.
		claimed, err := o.d.Store.Claim(o.ctx(), herald.ClaimParams{Token: herald.NewID(), Owner: "dead-relay",
			Limit: 50, Lease: 300 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, claimed, 50)
		rec := NewRecorder()
		r := StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, ids)
		require.Eventually(t, func() bool { return r.Stats().Rescued == 50 }, waitFor, 5*time.Millisecond)
		o.waitCounts(waitFor, map[string]int64{"t/published": 50})
	}},

	{"SeveralRelaysPublishEveryEventExactlyOnce", func(t *testing.T, o *Kit) {
		// A backlog to share, then producers that commit while three
		// relays claim and acknowledge, each relay on connections of its
		// own as a process of its own would be: where the database has one
		// writer at a time, they all contend for it. Long leases: a relay
		// slowed down by the contention must not lose its claims, which
		// would deliver their events again.
		const backlog, producers, txs, perTx = 8000, 4, 5, 100
		const total = backlog + producers*txs*perTx
		ids := o.writeKeys("t", backlog, 50)
		rec := NewRecorder()
		relays := make([]*herald.Relay, 3)
		for i := range relays {
			relays[i] = StartRelay(t, o.d.Open(t), rec, func(c *herald.RelayConfig) {
				c.Owner = fmt.Sprintf("relay-%d", i)
				c.Lease = time.Minute
			})
		}
		ids = append(ids, o.writeConcurrently(t, producers, txs, func(p int) []herald.Message {
			msgs := make([]herald.Message, perTx)
			for i := range msgs {
				msgs[i] = keyed("t", fmt.Sprintf("p%d-%d", p, i%10))
			}
			return msgs
		})...)
		require.Len(t, ids, total)
		rec.RequireAllDeliveredOnce(t, ids)
		distinct, dups := rec.Total()
		require.Equal(t, total, distinct)
		require.Zero(t, dups)
		o.waitCounts(3*waitFor, map[string]int64{"t/published": total})
		for i, r := range relays {
			require.Positive(t, r.Stats().Published, "relay %d took no share", i)
		}
		for _, ev := range o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StatePublished, Limit: total}) {
			require.Equal(t, 1, ev.Attempt, "event %s was claimed twice", ev.ID)
		}
	}},

	{"SeveralOrderedRelaysKeepEveryKeysOrderUnderFailures", func(t *testing.T, o *Kit) {
		// heraldpg runs the same with relay processes it kills and pauses;
		// here the relays share a process and every database.
		const keys, events, writers, perTx = 40, 2000, 4, 5
		rec := NewRecorder()
		rec.Fail = func(herald.Envelope, int) error {
			if rand.Float64() < 0.1 {
				return errors.New("injected broker failure")
			}
			return nil
		}
		relays := make([]*herald.Relay, 3)
		for i := range relays {
			relays[i] = StartRelay(t, o.d.Open(t), rec, func(c *herald.RelayConfig) {
				c.Owner = fmt.Sprintf("relay-%d", i)
				c.Lease = time.Minute // as in SeveralRelaysPublishEveryEventExactlyOnce
				c.BatchSize, c.MaxPerKey, c.MaxInFlight = 50, 10, 4
				c.Retry = herald.RetryPolicy{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 1000, MaxAge: time.Hour}
			})
		}
		// Each key belongs to one writer, which commits its transactions
		// one after the other: a key's commit order is its seq order, while
		// the keys' transactions interleave.
		ids := o.writeConcurrently(t, writers, events/writers/perTx, func(w int) []herald.Message {
			msgs := make([]herald.Message, perTx)
			for i := range msgs {
				msgs[i] = keyed("orders", fmt.Sprintf("k%02d", w+writers*rand.IntN(keys/writers)))
			}
			return msgs
		})
		require.Len(t, ids, events)
		rec.RequireAllDeliveredOnce(t, ids)
		o.waitCounts(3*waitFor, map[string]int64{"orders/published": events})

		last := map[string]int64{}
		for _, env := range rec.Order() {
			require.Greater(t, env.Seq, last[env.Key], "key %s: event seq %d delivered after seq %d", env.Key, env.Seq, last[env.Key])
			last[env.Key] = env.Seq
		}
		// Several relays worked at once (on a loaded machine one of three
		// may be starved of claims through a whole run, on SQLite above
		// all, whose claims take turns at one write lock).
		working := 0
		for _, r := range relays {
			if r.Stats().Published > 0 {
				working++
			}
		}
		require.GreaterOrEqual(t, working, 2, "the events were not shared between relays")
		retried := 0
		for _, ev := range o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StatePublished, Limit: events}) {
			if ev.Attempt > 1 {
				retried++
			}
		}
		require.Greater(t, retried, events/20, "about a tenth of the events failed at least once")
	}},

	{"RelaysThatDeleteOnPublishKeepEveryGuarantee", func(t *testing.T, o *Kit) {
		// RelayConfig.DeleteOnPublish: the same relays as above, under the
		// same failures, acknowledging by deleting. Every event is
		// delivered once, each key in commit order, failures are retried,
		// and nothing is left in the table.
		const keys, events, writers, perTx = 40, 1000, 4, 5
		rec := NewRecorder()
		var failed atomic.Int64
		rec.Fail = func(herald.Envelope, int) error {
			if rand.Float64() < 0.1 {
				failed.Add(1)
				return errors.New("injected broker failure")
			}
			return nil
		}
		relays := make([]*herald.Relay, 3)
		for i := range relays {
			relays[i] = StartRelay(t, o.d.Open(t), rec, func(c *herald.RelayConfig) {
				c.Owner = fmt.Sprintf("relay-%d", i)
				c.Lease = time.Minute
				c.DeleteOnPublish = true
				c.BatchSize, c.MaxPerKey, c.MaxInFlight = 50, 10, 4
				c.Retry = herald.RetryPolicy{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 1000, MaxAge: time.Hour}
			})
		}
		ids := o.writeConcurrently(t, writers, events/writers/perTx, func(w int) []herald.Message {
			msgs := make([]herald.Message, perTx)
			for i := range msgs {
				msgs[i] = keyed("orders", fmt.Sprintf("k%02d", w+writers*rand.IntN(keys/writers)))
			}
			return msgs
		})
		require.Len(t, ids, events)
		rec.RequireAllDeliveredOnce(t, ids)
		o.waitCounts(3*waitFor, map[string]int64{})
		last := map[string]int64{}
		for _, env := range rec.Order() {
			require.Greater(t, env.Seq, last[env.Key], "key %s: event seq %d delivered after seq %d", env.Key, env.Seq, last[env.Key])
			last[env.Key] = env.Seq
		}
		require.Positive(t, failed.Load(), "no failure was injected")
		// A relay counts an acknowledgement once the store has answered
		// it, after the table shows it: stopped, its count is final.
		var published int64
		for _, r := range relays {
			stopRelay(t, r)
			published += r.Stats().Published
		}
		require.Equal(t, int64(events), published, "each deleted row counts as published once")
		for _, id := range ids[:10] {
			o.requireGone(id)
		}
	}},

	{"GracefulStopMidBatchReleasesAtOnceWithoutDuplicates", func(t *testing.T, o *Kit) {
		ids := o.writeKeys("t", 400, 50)
		rec := NewRecorder()
		// Confirms the first half of each batch, then hangs on the rest
		// until the relay gives up on it.
		hanging := make(chan struct{}, 16)
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			half := len(batch) / 2
			_ = rec.Publish(ctx, batch[:half])
			hanging <- struct{}{}
			<-ctx.Done()
			errs := make([]error, len(batch))
			for i := half; i < len(batch); i++ {
				errs[i] = ctx.Err()
			}
			return &herald.BatchError{Errs: errs}
		})
		// The grace after Stop's deadline is the time the database has to
		// take the outcomes and releases: a loaded machine's SQLite under
		// the race detector has taken more than the default 2s. What Stop
		// must not wait for is the publish timeout or the lease.
		r, err := herald.NewRelay(&herald.RelayConfig{
			Store: o.d.Store, Publisher: pub, Logger: Logger(t), BatchSize: 100, MaxInFlight: 2,
			Lease: time.Hour, PublishTimeout: 2 * time.Minute, PollInterval: time.Millisecond,
			StopGrace: time.Minute,
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(o.ctx()))
		<-hanging
		<-hanging
		stopCtx, cancel := context.WithTimeout(o.ctx(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		require.NoError(t, r.Stop(stopCtx))
		require.Less(t, time.Since(start), time.Minute+10*time.Second, "stop waited for the publish timeout")
		require.NoError(t, r.Stop(o.ctx()), "a second Stop is harmless")

		counts := o.Counts()
		require.Zero(t, counts["t/claimed"], "rows left claimed after a graceful stop")
		distinct, _ := rec.Total()
		require.EqualValues(t, distinct, counts["t/published"])
		require.Equal(t, 100, distinct, "two batches of 100, half of each confirmed")
		for _, ev := range o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady, Limit: 1000}) {
			require.Zero(t, ev.Attempt, "released rows kept the attempt of a claim that never published")
		}

		// A new relay finishes the job; nothing is delivered twice.
		StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, ids)
	}},

	{"StopWaitsForInFlightPublishes", func(t *testing.T, o *Kit) {
		ids := o.writeKeys("t", 200, 50)
		rec := NewRecorder()
		started := make(chan struct{}, 8)
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			started <- struct{}{}
			time.Sleep(50 * time.Millisecond) // a slow broker round trip
			return rec.Publish(ctx, batch)
		})
		r, err := herald.NewRelay(&herald.RelayConfig{Store: o.d.Store, Publisher: pub, Logger: Logger(t), BatchSize: 100})
		require.NoError(t, err)
		require.NoError(t, r.Start(o.ctx()))
		<-started
		require.NoError(t, r.Stop(o.ctx()))
		counts := o.Counts()
		require.Zero(t, counts["t/claimed"])
		distinct, dups := rec.Total()
		require.Positive(t, distinct)
		require.Zero(t, dups)
		require.EqualValues(t, distinct, counts["t/published"])
		StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, ids)
	}},

	{"RelayWaitsForAvailableAt", func(t *testing.T, o *Kit) {
		later := msg("t")
		later.AvailableAt = time.Now().Add(time.Hour)
		o.Write(later)
		now := o.Write(msg("t"))
		rec := NewRecorder()
		StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, now)
		require.Zero(t, rec.Count(later.ID))
		require.Equal(t, heraldadmin.StateReady, o.Get(later.ID).State)
	}},

	{"RelayPublishesPlainSQLInserts", func(t *testing.T, o *Kit) {
		id, err := o.d.InsertPlain(o.ctx(), "orders", "order-42", []byte(`{"total":4200}`), "")
		require.NoError(t, err)
		rec := NewRecorder()
		StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, []string{id})
		env := rec.Env(id)
		require.Equal(t, "orders", env.Topic)
		require.Equal(t, "order-42", env.Key)
		require.Equal(t, `{"total":4200}`, string(env.Payload))
		o.waitState(id, heraldadmin.StatePublished)
	}},

	{"RelayMakesInvalidRowsFromOtherProgramsDeadWithAReason", func(t *testing.T, o *Kit) {
		for _, row := range []struct{ topic, headers string }{
			{"has space", "{}"},
			{"t", `{"Nats-Msg-Id": "spoof"}`},
			{"t", `{"X-Count": "3"}`}, // a number is refused: see oddrows.go
		} {
			_, err := o.d.InsertPlain(o.ctx(), row.topic, "", []byte("x"), row.headers)
			require.NoError(t, err)
		}
		rec := NewRecorder()
		StartRelay(t, o.d.Store, rec, nil)
		o.waitCounts(waitFor, map[string]int64{"has space/dead": 1, "t/dead": 1, "t/published": 1})
		dead := o.list(heraldadmin.EventFilter{All: true})
		require.Len(t, dead, 2)
		var reasons []string
		for _, ev := range dead {
			reasons = append(reasons, ev.LastError)
		}
		// The reason names the field, not the row's place in its batch
		// ("message 0: "), which means nothing to an operator.
		require.ElementsMatch(t, []string{
			"permanent: invalid row: topic: contains whitespace or a control character",
			`permanent: invalid row: headers: header name "Nats-Msg-Id" is reserved (prefix "nats-")`,
		}, reasons)
		distinct, _ := rec.Total()
		require.Equal(t, 1, distinct, "only the valid row reached the broker")
	}},

	{"RelayRetentionDeletesOnlyOldPublishedRows", func(t *testing.T, o *Kit) {
		old := o.put(heraldadmin.StatePublished, msg("old"), msg("old"), msg("old"))
		recent := o.put(heraldadmin.StatePublished, msg("new"))
		dead := o.put(heraldadmin.StateDead, msg("dead"))
		ready := o.Write(msg("ready"))
		o.backdate(48*time.Hour, old...)
		o.backdate(time.Hour, recent...)
		o.backdate(10*24*time.Hour, dead[0], ready[0])
		r := StartRelay(t, o.d.Store, NewRecorder(), func(c *herald.RelayConfig) {
			c.Retention = 24 * time.Hour
			c.CleanupBatchSize = 2 // several small statements
			c.CleanupInterval = 10 * time.Millisecond
		})
		require.Eventually(t, func() bool { return r.Stats().Deleted == 3 }, waitFor, 5*time.Millisecond)
		for _, id := range old {
			o.requireGone(id)
		}
		// Dead rows stay until an operator acts; the ready row is
		// published, not deleted.
		o.waitCounts(waitFor, map[string]int64{"new/published": 1, "dead/dead": 1, "ready/published": 1})
	}},

	{"RelaySurvivesAPanickingPublisher", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("t"))
		rec := NewRecorder()
		rec.Fail = func(_ herald.Envelope, attempt int) error {
			if attempt == 1 {
				panic("publisher bug")
			}
			return nil
		}
		StartRelay(t, o.d.Store, rec, nil)
		rec.RequireAllDeliveredOnce(t, ids)
		require.Equal(t, 2, o.waitState(ids[0], heraldadmin.StatePublished).Attempt, "the panic cost one attempt")
	}},

	{"RelayStartAndStopAreSafeInAnyOrder", func(t *testing.T, o *Kit) {
		ctx := o.ctx()
		_, err := herald.NewRelay(&herald.RelayConfig{Store: o.d.Store})
		require.ErrorContains(t, err, "Publisher is required")
		_, err = herald.NewRelay(&herald.RelayConfig{Store: o.d.Store, Publisher: NewRecorder(), Lease: time.Second, PublishTimeout: time.Second})
		require.ErrorContains(t, err, "Lease")

		r, err := herald.NewRelay(&herald.RelayConfig{Store: o.d.Store, Publisher: NewRecorder(), Logger: Logger(t)})
		require.NoError(t, err)
		require.NoError(t, r.Stop(ctx), "stop before start")
		require.ErrorIs(t, r.Start(ctx), herald.ErrRelayStopped)

		r, err = herald.NewRelay(&herald.RelayConfig{Store: o.d.Store, Publisher: NewRecorder(), Logger: Logger(t)})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		require.NoError(t, r.Start(ctx), "a second start is harmless")
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { assert.NoError(t, r.Stop(ctx)) })
		}
		wg.Wait()
	}},

	{"LateCommitIsDeliveredAfterWhatItsKeyPublished", func(t *testing.T, o *Kit) {
		ctx := o.ctx()
		// Transaction A writes first, so its event has the lower seq, and
		// stays open while B's events of the same key commit.
		txA := o.begin()
		late := keyed("orders", "k")
		require.NoError(t, txA.Write(ctx, late))
		early := o.Write(keyed("orders", "k"), keyed("orders", "k"))

		// The relay's first publish of key k waits at a gate.
		rec := NewRecorder()
		entered, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			once.Do(func() {
				close(entered)
				<-gate
			})
			return rec.Publish(ctx, batch)
		})
		StartRelay(t, o.d.Store, pub, nil)
		open := sync.OnceFunc(func() { close(gate) })
		t.Cleanup(open) // before the relay's Stop, should an assertion fail first
		<-entered

		// A commits while its key is in flight: its event is now the key's
		// lowest ready one, yet no claim may take it until the flight lands.
		require.NoError(t, txA.Commit(ctx))
		envs, err := o.d.Store.Claim(ctx, herald.ClaimParams{Token: herald.NewID(), Owner: "test", Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		require.Empty(t, envs, "key k is in flight: the late event must wait")

		open()
		all := append(slices.Clone(early), late.ID)
		rec.RequireAllDeliveredOnce(t, all)
		require.Equal(t, all, rec.OrderOf(all...), "delivered in commit order, the late commit last, not skipped")
	}},

	{"PoisonEventParksOnlyItsKeyUntilRequeued", func(t *testing.T, o *Kit) {
		var msgs []herald.Message
		for i := range 400 {
			msgs = append(msgs, keyed("orders", fmt.Sprintf("k%02d", i%40)))
		}
		ids := o.Write(msgs...)
		var poisoned []string // key k07, from its third event on
		for i, m := range msgs {
			if m.Key == "k07" {
				poisoned = append(poisoned, ids[i])
			}
		}
		poisoned = poisoned[2:]
		poison := poisoned[0]

		var cured atomic.Bool
		rec := NewRecorder()
		rec.Fail = func(env herald.Envelope, _ int) error {
			if env.ID == poison && !cured.Load() {
				return herald.Permanent(errors.New("schema registry refuses this payload"))
			}
			return nil
		}
		StartRelay(t, o.d.Store, rec, func(c *herald.RelayConfig) { c.MaxInFlight = 4; c.BatchSize = 30 })

		var others []string
		for _, id := range ids {
			if !slices.Contains(poisoned, id) {
				others = append(others, id)
			}
		}
		rec.RequireAllDeliveredOnce(t, others)
		o.waitState(poison, heraldadmin.StateDead)

		blocked := o.blockedKeys()
		require.Len(t, blocked, 1)
		require.Equal(t, heraldadmin.BlockedKey{Topic: "orders", Key: "k07", EventID: poison, Waiting: int64(len(poisoned) - 1),
			Since: blocked[0].Since}, blocked[0])
		for _, id := range poisoned[1:] {
			require.Equal(t, heraldadmin.StateReady, o.Get(id).State, "waiting behind the parked event")
			require.Zero(t, rec.Count(id))
		}

		cured.Store(true)
		n, err := o.d.Admin.RequeueDead(o.ctx(), heraldadmin.EventFilter{IDs: []string{poison}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		rec.RequireAllDeliveredOnce(t, poisoned)
		require.Equal(t, poisoned, rec.OrderOf(poisoned...), "the parked key resumed in order")
		require.Empty(t, o.blockedKeys())
	}},
}

// errBroker is a broker's error that carries a secret, which must never
// reach last_error.
var errBroker = errors.New("broker said no to nats://relay:hunter2@broker.internal:4222")

// writeKeys commits n messages on topic spread over keys keys (k0, k1,
// ...), in transactions of up to 500, and returns their ids.
func (o *Kit) writeKeys(topic string, n, keys int) []string {
	o.t.Helper()
	var ids []string
	for done := 0; done < n; {
		batch := make([]herald.Message, min(n-done, 500))
		for i := range batch {
			batch[i] = keyed(topic, fmt.Sprintf("k%d", (done+i)%keys))
		}
		ids = append(ids, o.Write(batch...)...)
		done += len(batch)
	}
	return ids
}

// waitRow polls the row of id until ok says yes, and returns it.
func (o *Kit) waitRow(id, what string, ok func(heraldadmin.EventRow) bool) heraldadmin.EventRow {
	o.t.Helper()
	var ev heraldadmin.EventRow
	require.EventuallyWithT(o.t, func(c *assert.CollectT) {
		got, err := o.d.Admin.GetEvent(o.ctx(), id)
		require.NoError(c, err)
		require.True(c, ok(got), "event %s: waiting for %s", id, what)
		ev = got
	}, waitFor, 2*time.Millisecond)
	return ev
}

// waitState waits until the row of id is in state, and returns it.
func (o *Kit) waitState(id string, state heraldadmin.State) heraldadmin.EventRow {
	o.t.Helper()
	return o.waitRow(id, "state "+string(state), func(ev heraldadmin.EventRow) bool { return ev.State == state })
}

// waitCounts waits up to d until the table's counts by "topic/state" are
// want.
func (o *Kit) waitCounts(d time.Duration, want map[string]int64) {
	o.t.Helper()
	require.EventuallyWithT(o.t, func(c *assert.CollectT) {
		st, err := o.d.Admin.Status(o.ctx())
		require.NoError(c, err)
		require.Equal(c, want, countsOf(st))
	}, d, 10*time.Millisecond)
}
