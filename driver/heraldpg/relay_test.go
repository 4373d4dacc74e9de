package heraldpg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/heraldtest"
)

func TestRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("RolledBackEventsAreNeverPublished", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var ghosts []string
		for i := range 200 {
			tx, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			id := herald.NewID()
			require.NoError(t, b.writer.WriteTx(ctx, tx, herald.Message{ID: id, Topic: "t"}))
			if i%3 == 0 {
				ghosts = append(ghosts, id)
				require.NoError(t, tx.Rollback(ctx))
			} else {
				require.NoError(t, tx.Commit(ctx))
			}
		}
		// A marker written last: once it is delivered, every earlier commit
		// has been claimed too (one relay, claims in write order).
		marker := b.write(t, herald.Message{Topic: "t"})
		rec := newRecorder()
		b.startRelay(t, rec, func(c *herald.RelayConfig) { c.MaxInFlight = 1 })
		requireAllDeliveredOnce(t, rec, marker)
		distinct, dups := rec.total()
		require.Equal(t, 200-len(ghosts)+1, distinct)
		require.Zero(t, dups)
		for _, id := range ghosts {
			require.Zero(t, rec.count(id), "ghost %s from a rolled-back transaction was published", id)
		}
	})

	t.Run("PublishFailureRetriesWithBackoffAndKeepsAScrubbedError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"})
		release := make(chan struct{})
		rec := newRecorder()
		rec.Fail = func(env herald.Envelope, attempt int) error {
			if attempt == 1 {
				return errBroker
			}
			<-release // hold the second attempt until the row has been inspected
			return nil
		}
		b.startRelay(t, rec, func(c *herald.RelayConfig) {
			c.Retry = herald.RetryPolicy{Base: 400 * time.Millisecond, Cap: time.Second, MaxAttempts: 5, MaxAge: time.Hour}
		})
		var ev heraldadmin.EventRow
		require.Eventually(t, func() bool {
			ev = b.row(t, ids[0])
			return ev.LastError != ""
		}, 10*time.Second, 2*time.Millisecond)
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Equal(t, 1, ev.Attempt)
		require.Contains(t, ev.LastError, "broker said no")
		require.NotContains(t, ev.LastError, "hunter2", "a secret reached last_error")
		// Equal jitter: the retry is at least half the base delay away.
		var wait float64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT extract(epoch FROM available_at - now()) FROM `+b.table+` WHERE id = $1`, ids[0]).Scan(&wait))
		require.Greater(t, wait, 0.1, "retry scheduled %.3fs ahead", wait)
		close(release)
		requireAllDeliveredOnce(t, rec, ids)
		require.Eventually(t, func() bool { return b.row(t, ids[0]).State == heraldadmin.StatePublished }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, 2, b.row(t, ids[0]).Attempt)
	})

	t.Run("PermanentErrorGoesStraightToDead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "bad"}, herald.Message{Topic: "good"})
		rec := newRecorder()
		rec.Fail = func(env herald.Envelope, _ int) error {
			if env.Topic == "bad" {
				return herald.Permanent(errors.New("message too large"))
			}
			return nil
		}
		b.startRelay(t, rec, nil)
		require.Eventually(t, func() bool { return b.row(t, ids[0]).State == heraldadmin.StateDead }, 10*time.Second, 5*time.Millisecond)
		ev := b.row(t, ids[0])
		require.Equal(t, 1, ev.Attempt)
		require.NotNil(t, ev.DeadAt)
		require.Contains(t, ev.LastError, "message too large")
		requireAllDeliveredOnce(t, rec, ids[1:])
	})

	t.Run("MaxAttemptsMakesDeadAndRequeuePublishes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"})
		var healed atomic.Bool
		rec := newRecorder()
		rec.Fail = func(herald.Envelope, int) error {
			if healed.Load() {
				return nil
			}
			return errBroker
		}
		b.startRelay(t, rec, func(c *herald.RelayConfig) {
			c.Retry = herald.RetryPolicy{Base: time.Millisecond, Cap: 5 * time.Millisecond, MaxAttempts: 3, MaxAge: time.Hour}
		})
		require.Eventually(t, func() bool { return b.row(t, ids[0]).State == heraldadmin.StateDead }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, 3, b.row(t, ids[0]).Attempt)
		require.Zero(t, rec.count(ids[0]))

		healed.Store(true)
		n, err := b.driver.RequeueDead(ctx, heraldadmin.EventFilter{IDs: ids})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		requireAllDeliveredOnce(t, rec, ids)
		require.Eventually(t, func() bool { return b.row(t, ids[0]).State == heraldadmin.StatePublished }, 10*time.Second, 5*time.Millisecond)
	})

	t.Run("MaxAgeMakesDead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"})
		_, err := b.pool.Exec(ctx, `UPDATE `+b.table+` SET created_at = now() - interval '2 hours'`)
		require.NoError(t, err)
		rec := newRecorder()
		rec.Fail = func(herald.Envelope, int) error { return errBroker }
		b.startRelay(t, rec, nil) // MaxAttempts 5, MaxAge 1h
		require.Eventually(t, func() bool { return b.row(t, ids[0]).State == heraldadmin.StateDead }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, 1, b.row(t, ids[0]).Attempt)
	})

	t.Run("OutageSpendsNoAttemptsAndNothingDies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeN(t, "t", 300)
		var calls atomic.Int64
		var down atomic.Bool
		down.Store(true)
		inner := newRecorder()
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			calls.Add(1)
			if down.Load() {
				return errors.New("nats: connection closed")
			}
			return inner.Publish(ctx, batch)
		})
		b.startRelay(t, pub, func(c *herald.RelayConfig) {
			c.Retry = herald.RetryPolicy{Base: time.Millisecond, Cap: time.Millisecond, MaxAttempts: 2, MaxAge: time.Hour}
		})
		// Many more failed calls than MaxAttempts allows for one event.
		require.Eventually(t, func() bool { return calls.Load() >= 10 }, 20*time.Second, 5*time.Millisecond)
		down.Store(false)
		requireAllDeliveredOnce(t, inner, ids)
		require.Zero(t, b.count(t, "state = 'dead'"))
		require.Zero(t, b.count(t, "attempts > 1"), "an outage spent attempts")
	})

	t.Run("RelayKilledAfterClaimingIsRescued", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeN(t, "t", 50)
		// A relay claims and dies: its claim is never acknowledged.
		claimed, err := b.driver.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Owner: "dead-relay", Limit: 50, Lease: 300 * time.Millisecond})
		require.NoError(t, err)
		require.Len(t, claimed, 50)
		rec := newRecorder()
		r := b.startRelay(t, rec, nil)
		requireAllDeliveredOnce(t, rec, ids)
		require.Eventually(t, func() bool { return r.Stats().Rescued == 50 }, 10*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool { return b.count(t, "state = 'published'") == 50 }, 10*time.Second, 5*time.Millisecond)
	})

	t.Run("LeaseLostMeansTheOldRelayChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.write(t, herald.Message{Topic: "t"}, herald.Message{Topic: "t"})
		tokenA := uuid.NewString()
		_, err := b.driver.Claim(ctx, herald.ClaimParams{Token: tokenA, Owner: "paused-relay", Limit: 2, Lease: 100 * time.Millisecond})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			n, err := b.driver.RescueExpired(ctx, 10)
			require.NoError(t, err)
			return n == 2
		}, 10*time.Second, 10*time.Millisecond)

		// Relay B now owns the rows; it has published the first and still
		// holds the second.
		tokenB := uuid.NewString()
		got, err := b.driver.Claim(ctx, herald.ClaimParams{Token: tokenB, Owner: "relay-b", Limit: 2, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, got, 2)
		res, err := b.driver.Complete(ctx, herald.CompleteParams{Token: tokenB, Published: ids[:1]})
		require.NoError(t, err)
		require.Equal(t, 1, res.Published)

		// A wakes up and acknowledges with its stale token: nothing changes.
		res, err = b.driver.Complete(ctx, herald.CompleteParams{Token: tokenA, Published: ids[1:],
			Failed: []herald.Failure{{ID: ids[0], Outcome: herald.OutcomeDead, Error: "late"}}})
		require.NoError(t, err)
		require.Equal(t, herald.CompleteResult{}, res)
		res, err = b.driver.Complete(ctx, herald.CompleteParams{Token: tokenA, Published: ids})
		require.NoError(t, err)
		require.Zero(t, res.Published)
		res, err = b.driver.Complete(ctx, herald.CompleteParams{Token: tokenA,
			Failed: []herald.Failure{{ID: ids[1], Outcome: herald.OutcomeReleased}}})
		require.NoError(t, err)
		require.Empty(t, res.Failed)

		require.Equal(t, heraldadmin.StatePublished, b.row(t, ids[0]).State)
		second := b.row(t, ids[1])
		require.Equal(t, heraldadmin.StateClaimed, second.State)
		require.Equal(t, "relay-b", second.ClaimedBy)
		require.Equal(t, 1, b.count(t, "claim_token = $1", tokenB))
	})

	t.Run("ThreeRelaysPublishTenThousandEventsExactlyOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeN(t, "t", 10000)
		rec := newRecorder()
		relays := make([]*herald.Relay, 3)
		for i := range relays {
			relays[i] = b.startRelay(t, rec, func(c *herald.RelayConfig) { c.Owner = fmt.Sprintf("relay-%d", i) })
		}
		requireAllDeliveredOnce(t, rec, ids)
		distinct, dups := rec.total()
		require.Equal(t, 10000, distinct)
		require.Zero(t, dups)
		require.Eventually(t, func() bool { return b.count(t, "state = 'published'") == 10000 }, 30*time.Second, 10*time.Millisecond)
		for i, r := range relays {
			require.Positive(t, r.Stats().Published, "relay %d took no share", i)
		}
	})

	t.Run("GracefulStopMidBatchReleasesAtOnceWithoutDuplicates", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeN(t, "t", 400)
		rec := newRecorder()
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
		r, err := herald.NewRelay(&herald.RelayConfig{
			Store: b.driver, Publisher: pub, Logger: testLogger(t), BatchSize: 100, MaxInFlight: 2,
			Lease: time.Hour, PublishTimeout: time.Minute, PollInterval: time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		<-hanging
		<-hanging
		stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		require.NoError(t, r.Stop(stopCtx))
		require.Less(t, time.Since(start), 5*time.Second, "stop waited for something other than its deadline")
		require.NoError(t, r.Stop(ctx), "a second Stop is harmless")

		require.Zero(t, b.count(t, "state = 'claimed'"), "rows left claimed after a graceful stop")
		distinct, _ := rec.total()
		require.Equal(t, distinct, b.count(t, "state = 'published'"))
		require.Equal(t, 100, distinct, "two batches of 100, half of each confirmed")
		require.Zero(t, b.count(t, "state = 'ready' AND attempts > 0"), "released rows kept the attempt of a claim that never published")

		// A new relay finishes the job; nothing is delivered twice.
		b.startRelay(t, rec, nil)
		requireAllDeliveredOnce(t, rec, ids)
	})

	t.Run("StopWaitsForInFlightPublishes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ids := b.writeN(t, "t", 200)
		rec := newRecorder()
		started := make(chan struct{}, 8)
		pub := herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			started <- struct{}{}
			time.Sleep(50 * time.Millisecond) // a slow broker round trip
			return rec.Publish(ctx, batch)
		})
		r, err := herald.NewRelay(&herald.RelayConfig{Store: b.driver, Publisher: pub, Logger: testLogger(t), BatchSize: 100})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		<-started
		require.NoError(t, r.Stop(ctx))
		require.Zero(t, b.count(t, "state = 'claimed'"))
		distinct, dups := rec.total()
		require.Positive(t, distinct)
		require.Zero(t, dups)
		require.Equal(t, distinct, b.count(t, "state = 'published'"))
		b.startRelay(t, rec, nil)
		requireAllDeliveredOnce(t, rec, ids)
	})

	t.Run("DelayedEventsWaitForAvailableAt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		later := b.write(t, herald.Message{Topic: "t", AvailableAt: time.Now().Add(time.Hour)})
		now := b.write(t, herald.Message{Topic: "t"})
		rec := newRecorder()
		b.startRelay(t, rec, nil)
		requireAllDeliveredOnce(t, rec, now)
		require.Zero(t, rec.count(later[0]))
		require.Equal(t, heraldadmin.StateReady, b.row(t, later[0]).State)
	})

	t.Run("InvalidRowsFromOtherProgramsGoToDeadWithAReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `INSERT INTO `+b.table+` (topic, payload, headers) VALUES
			('has space', 'x', '{}'),
			('t', 'x', '{"Nats-Msg-Id": "spoof"}'),
			('t', 'x', '{"X-Count": 3}')`)
		require.NoError(t, err)
		rec := newRecorder()
		b.startRelay(t, rec, nil)
		require.Eventually(t, func() bool { return b.count(t, "state = 'dead'") == 2 }, 10*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool { return b.count(t, "state = 'published'") == 1 }, 10*time.Second, 5*time.Millisecond)
		dead, err := b.driver.ListEvents(ctx, heraldadmin.EventFilter{All: true})
		require.NoError(t, err)
		for _, ev := range dead {
			require.Contains(t, ev.LastError, "invalid row")
		}
		distinct, _ := rec.total()
		require.Equal(t, 1, distinct, "only the valid row reached the broker")
	})

	t.Run("RetentionDeletesOnlyOldPublishedRows", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.pool.Exec(ctx, `INSERT INTO `+b.table+` (topic, payload, state, published_at, dead_at) VALUES
			('old', 'x', 'published', now() - interval '2 days', NULL),
			('old', 'x', 'published', now() - interval '2 days', NULL),
			('old', 'x', 'published', now() - interval '2 days', NULL),
			('new', 'x', 'published', now() - interval '1 hour', NULL),
			('dead', 'x', 'dead', NULL, now() - interval '9 days'),
			('ready', 'x', 'ready', NULL, NULL)`)
		require.NoError(t, err)
		_, err = b.pool.Exec(ctx, `UPDATE `+b.table+` SET created_at = now() - interval '10 days'`)
		require.NoError(t, err)
		r := b.startRelay(t, newRecorder(), func(c *herald.RelayConfig) {
			c.Retention = 24 * time.Hour
			c.CleanupBatchSize = 2 // several small statements
			c.CleanupInterval = 10 * time.Millisecond
		})
		require.Eventually(t, func() bool { return b.count(t, "topic = 'old'") == 0 && r.Stats().Deleted == 3 }, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, 1, b.count(t, "topic = 'new'"))
		require.Equal(t, 1, b.count(t, "topic = 'dead'"), "dead rows stay until an operator acts")
		require.Eventually(t, func() bool { return b.count(t, "topic = 'ready' AND state = 'published'") == 1 }, 10*time.Second, 5*time.Millisecond,
			"the ready row is published, not deleted")
	})

	t.Run("SurvivesLosingEveryDatabaseConnection", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The relay gets a pool of its own, tagged so that only its
		// connections are killed: what a database restart does to it.
		app := "herald_test_" + uuid.NewString()[:8]
		cfg, err := pgxpool.ParseConfig(heraldtest.PostgresDSN(t))
		require.NoError(t, err)
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		d, err := heraldpg.New(pool, b.cfg)
		require.NoError(t, err)
		rec := newRecorder()
		r, err := herald.NewRelay(&herald.RelayConfig{Store: d, Publisher: rec, Logger: testLogger(t),
			PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, r.Start(ctx))
		t.Cleanup(func() { require.NoError(t, r.Stop(ctx)) })

		first := b.writeN(t, "t", 100)
		requireAllDeliveredOnce(t, rec, first)
		var killed int
		require.NoError(t, b.pool.QueryRow(ctx,
			`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&killed))
		require.Positive(t, killed)
		second := b.writeN(t, "t", 100)
		requireAllDeliveredOnce(t, rec, second)
	})
}

func TestRelayLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)

	_, err := herald.NewRelay(&herald.RelayConfig{Store: b.driver})
	require.ErrorContains(t, err, "Publisher is required")
	_, err = herald.NewRelay(&herald.RelayConfig{Store: b.driver, Publisher: newRecorder(), Lease: time.Second, PublishTimeout: time.Second})
	require.ErrorContains(t, err, "Lease")

	r, err := herald.NewRelay(&herald.RelayConfig{Store: b.driver, Publisher: newRecorder(), Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Stop(ctx), "stop before start")
	require.ErrorIs(t, r.Start(ctx), herald.ErrRelayStopped)

	r, err = herald.NewRelay(&herald.RelayConfig{Store: b.driver, Publisher: newRecorder(), Logger: testLogger(t)})
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Start(ctx), "a second start is harmless")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { require.NoError(t, r.Stop(ctx)) })
	}
	wg.Wait()
}

func TestRelaySurvivesAPanickingPublisher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.write(t, herald.Message{Topic: "t"})
	rec := newRecorder()
	rec.Fail = func(_ herald.Envelope, attempt int) error {
		if attempt == 1 {
			panic("publisher bug")
		}
		return nil
	}
	b.startRelay(t, herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		return rec.Publish(ctx, batch)
	}), nil)
	requireAllDeliveredOnce(t, rec, ids)
	require.Eventually(t, func() bool { return b.row(t, ids[0]).State == heraldadmin.StatePublished }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 2, b.row(t, ids[0]).Attempt, "the panic cost one attempt")
}

// The database really goes away and comes back (fast shutdown, then a new
// postmaster on the same port): the relay keeps running, its pool
// reconnects, and events committed after the restart are delivered.
func TestRelaySurvivesADatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc := heraldtest.PrivateCluster(t)
	pool, err := pgxpool.New(ctx, pc.DSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := heraldpg.New(pool, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(ctx))
	w, err := heraldpg.NewWriter(nil)
	require.NoError(t, err)
	// write retries: the first statements after the restart may meet
	// connections the old server closed, which the pool then replaces.
	write := func(n int) []string {
		msgs := make([]herald.Message, n)
		ids := make([]string, n)
		for i := range msgs {
			ids[i] = herald.NewID()
			msgs[i] = herald.Message{ID: ids[i], Topic: "t", Payload: []byte("x")}
		}
		require.Eventually(t, func() bool {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return false
			}
			defer tx.Rollback(ctx)
			return w.WriteTx(ctx, tx, msgs...) == nil && tx.Commit(ctx) == nil
		}, 30*time.Second, 20*time.Millisecond)
		return ids
	}
	published := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM herald_outbox WHERE state = 'published'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}

	rec := newRecorder()
	var logs heraldtest.LogBuffer
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Publisher: rec,
		Logger:       slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		PollInterval: time.Millisecond, IdlePollInterval: 10 * time.Millisecond, OutageBackoffCap: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { require.NoError(t, relay.Stop(ctx)) })

	before := write(100)
	requireAllDeliveredOnce(t, rec, before)
	require.Eventually(t, func() bool { return published() == 100 }, 10*time.Second, 5*time.Millisecond)

	pc.Stop(t)
	pc.Start(t)

	after := write(100)
	requireAllDeliveredOnce(t, rec, append(before, after...))
	require.Eventually(t, func() bool { return published() == 200 }, 30*time.Second, 10*time.Millisecond)

	// An outage is a pair of log lines, however many claims failed during
	// it. (The pool may still hold a dead connection after the restart,
	// which makes a second, short episode: still a pair.)
	out := logs.String()
	down := strings.Count(out, "database unreachable")
	require.GreaterOrEqual(t, down, 1, out)
	require.Equal(t, down, strings.Count(out, "database reachable again"), out)
	require.NotContains(t, out, "claim failed", "per-retry lines are Debug")
}
