package heraldtest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldtest"
)

// envs returns envelopes as a relay hands them over: ids and keys filled,
// sequence numbers in batch order, first attempt.
func envs(t *testing.T, msgs ...herald.Message) []herald.Envelope {
	t.Helper()
	prepared, err := herald.Prepare(msgs, 0)
	require.NoError(t, err)
	out := make([]herald.Envelope, len(prepared))
	for i, m := range prepared {
		out[i] = herald.Envelope{Message: m, Seq: int64(i + 1), Attempt: 1}
	}
	return out
}

func msg(key string, n int) herald.Message {
	return herald.Message{Topic: "orders", Key: key, Payload: fmt.Appendf(nil, `{"n":%d}`, n)}
}

// batchErrs returns the per-envelope errors of a Publish that reported some.
func batchErrs(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, n)
	return be.Errs
}

func TestRecorder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("TheZeroRecorderConfirmsAndRecordsEverything", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		batch := envs(t, msg("a", 1), msg("b", 1), msg("", 1))
		require.NoError(t, rec.Publish(ctx, batch))
		require.NoError(t, rec.Publish(ctx, nil))
		require.Equal(t, batch, rec.Published())
		require.Len(t, rec.Results(), 3)
		for _, res := range rec.Results() {
			require.NoError(t, res.Err)
		}
	})

	t.Run("WhatItKeepsDoesNotChangeWithTheCallersBatch", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		m := msg("a", 1)
		m.Headers = map[string]string{"h": "1"}
		batch := envs(t, m)
		require.NoError(t, rec.Publish(ctx, batch))
		batch[0].Payload[0] = 'X'
		batch[0].Headers["h"] = "2"
		require.Equal(t, `{"n":1}`, string(rec.Published()[0].Payload))
		require.Equal(t, "1", rec.Published()[0].Headers["h"])
	})

	t.Run("AFailedEventHoldsBackTheLaterEventsOfItsKeyOnly", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		boom := errors.New("boom")
		batch := envs(t, msg("a", 1), msg("b", 1), msg("a", 2), msg("", 1), msg("b", 2), msg("a", 3), msg("", 2),
			herald.Message{Topic: "other", Key: "a", Payload: []byte("{}")})
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{ID: batch[0].ID}.Matches, Err: herald.Permanent(boom)})
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "", JSON: `{"n":1}`}.Matches}) // fails "", 1 and b, 1
		errs := batchErrs(t, rec.Publish(ctx, batch), len(batch))

		require.ErrorIs(t, errs[0], boom)
		require.True(t, herald.IsPermanent(errs[0]), "the Failure's error as given")
		require.ErrorIs(t, errs[1], heraldtest.ErrInjected, "the second Failure: its default error")
		require.ErrorIs(t, errs[2], herald.ErrHeldBack, "a, 2 follows the failed a, 1")
		require.ErrorIs(t, errs[3], heraldtest.ErrInjected)
		require.ErrorIs(t, errs[4], herald.ErrHeldBack, "b, 2 follows the failed b, 1")
		require.ErrorIs(t, errs[5], herald.ErrHeldBack, "a, 3 too")
		require.NoError(t, errs[6], "events without a key are not ordered: nothing holds them back")
		require.NoError(t, errs[7], "key a of another topic is another key")
		require.Contains(t, errs[2].Error(), batch[0].ID, "a held-back event names the event it waits behind")

		rec.RequirePublished(t, heraldtest.Event{Topic: "orders", Key: "", JSON: `{"n":2}`},
			heraldtest.Event{Topic: "other", Key: "a"})
		results := rec.Results()
		require.Len(t, results, len(batch), "every envelope is recorded, failed or not")
		for i, res := range results {
			require.Equal(t, batch[i].ID, res.Envelope.ID)
			require.Equal(t, errs[i], res.Err)
		}
	})

	t.Run("AFailureWithTimesStopsAfterThatMany", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "a"}.Matches, Times: 2})
		batch := envs(t, msg("a", 1))
		require.Error(t, rec.Publish(ctx, batch))
		require.Error(t, rec.Publish(ctx, batch))
		require.NoError(t, rec.Publish(ctx, batch), "a transient failure: the third attempt goes through")
		require.Len(t, rec.Published(), 1)

		rec.Fail(heraldtest.Failure{})
		require.Error(t, rec.Publish(ctx, batch))
		require.Error(t, rec.Publish(ctx, batch), "without Times, a Failure never stops")
		rec.ClearFailures()
		require.NoError(t, rec.Publish(ctx, batch))
	})

	t.Run("HeldBackEventsDoNotSpendAFailure", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "a"}.Matches, Times: 1})
		errs := batchErrs(t, rec.Publish(ctx, envs(t, msg("a", 1), msg("a", 2))), 2)
		require.ErrorIs(t, errs[0], heraldtest.ErrInjected)
		require.ErrorIs(t, errs[1], herald.ErrHeldBack)
		require.NoError(t, rec.Publish(ctx, envs(t, msg("a", 1), msg("a", 2))))
	})

	t.Run("AWholeBatchFailureIsAPlainError", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		down := errors.New("broker down")
		rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "b"}.Matches, Err: down, WholeBatch: true, Times: 1})
		require.NoError(t, rec.Publish(ctx, envs(t, msg("a", 1))), "no matching envelope: the batch goes through")
		err := rec.Publish(ctx, envs(t, msg("a", 2), msg("b", 1)))
		require.ErrorIs(t, err, down)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "an outage is not per-event")
		require.NoError(t, rec.Publish(ctx, envs(t, msg("a", 2), msg("b", 1))))
		require.Len(t, rec.Published(), 3)
		require.Len(t, rec.Results(), 5)
	})

	t.Run("ACancelledContextPublishesNothing", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := rec.Publish(cctx, envs(t, msg("a", 1)))
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, rec.Published())
	})

	t.Run("WaitPublishedReturnsOnceEnoughArrive", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for j := range 25 {
					_ = rec.Publish(ctx, envs(t, msg(fmt.Sprintf("k%d", i), j), msg("", j)))
				}
			})
		}
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := rec.WaitPublished(wctx, 400)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(got), 400)
		wg.Wait()
		require.Len(t, rec.Published(), 400)
	})

	t.Run("WaitPublishedSaysHowManyWhenItGivesUp", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		require.NoError(t, rec.Publish(ctx, envs(t, msg("a", 1))))
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		got, err := rec.WaitPublished(wctx, 2)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.EqualError(t, err, "heraldtest: 1 of 2 events published: context deadline exceeded")
		require.Len(t, got, 1)
	})

	t.Run("WaitUntilSeesFailuresToo", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		rec.Fail(heraldtest.Failure{})
		done := make(chan error, 1)
		go func() {
			done <- rec.WaitUntil(ctx, func(results []heraldtest.Result) bool {
				return len(results) == 1 && errors.Is(results[0].Err, heraldtest.ErrInjected)
			})
		}()
		require.Error(t, rec.Publish(ctx, envs(t, msg("a", 1))))
		require.NoError(t, <-done)
	})

	t.Run("RequirePublishedFailsOnAMissingOrDuplicateEvent", func(t *testing.T) {
		t.Parallel()
		var rec heraldtest.Recorder
		batch := envs(t, msg("a", 1), msg("b", 1))
		require.NoError(t, rec.Publish(ctx, batch))
		require.NoError(t, rec.Publish(ctx, batch[:1])) // a duplicate of a, 1

		ft := &fakeT{}
		rec.RequirePublished(ft, heraldtest.Event{Key: "b"})
		ft.requirePassed(t)

		ft = &fakeT{}
		rec.RequirePublished(ft, heraldtest.Event{Key: "a"})
		msg := ft.requireFailed(t, "the Recorder's published events does not hold the expected events",
			"1 expected, 2 found on their topics and keys")
		require.Len(t, lines(msg, "unexpected: seq 1 id "+batch[0].ID), 1)

		ft = &fakeT{}
		rec.RequirePublished(ft, heraldtest.Event{Key: "a", JSON: `{"n":2}`})
		msg = ft.requireFailed(t, "missing: expected event 1", "$.n: 1, want 2")
		require.Len(t, lines(msg, "nearest: seq 1 id "+batch[0].ID), 1, "the first delivery is the nearest")
		require.Len(t, lines(msg, "unexpected: seq 1 id "+batch[0].ID), 1, "the duplicate is listed apart")

		ft = &fakeT{}
		rec.RequirePublished(ft, heraldtest.Event{Key: "b", JSON: `{"n":2}`})
		ft.requireFailed(t, `missing: expected event 1 {Key: "b", JSON: {"n":2}}`,
			"payload differs from the expected JSON at $.n: 1, want 2")

		ft = &fakeT{}
		rec.RequirePublished(ft)
		ft.requireFailed(t, "RequirePublished needs at least one expected Event")

		ft = &fakeT{}
		rec.RequireNotPublished(ft, heraldtest.Event{Key: "c"})
		ft.requirePassed(t)
		ft = &fakeT{}
		rec.RequireNotPublished(ft, heraldtest.Event{Key: "b"})
		ft.requireFailed(t, "the Recorder's published events holds events it should not", `key "b"`)
	})
}

// The Recorder behind a real relay: a transient failure is retried, a
// permanent one goes dead, and the dead event parks its key.
func TestRecorderBehindARelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := sqliteOutbox(t)
	store := o.store.(*heraldsqlite.Driver)
	o.commitNew(t, msg("a", 1), msg("a", 2), msg("b", 1), msg("c", 1), msg("c", 2))

	var rec heraldtest.Recorder
	rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "b"}.Matches, Times: 2})
	rec.Fail(heraldtest.Failure{Match: heraldtest.Event{Key: "c", JSON: `{"n":1}`}.Matches,
		Err: herald.Permanent(errors.New("refused"))})
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Publisher: &rec, Logger: slog.New(slog.DiscardHandler),
		PollInterval: 2 * time.Millisecond, IdlePollInterval: 20 * time.Millisecond,
		Retry: herald.RetryPolicy{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	t.Cleanup(func() { require.NoError(t, relay.Stop(context.Background())) })

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = rec.WaitPublished(wctx, 3)
	require.NoError(t, err)
	require.NoError(t, rec.WaitUntil(wctx, func(results []heraldtest.Result) bool {
		for _, res := range results {
			if herald.IsPermanent(res.Err) {
				return true
			}
		}
		return false
	}))
	require.NoError(t, relay.Stop(ctx))

	got := rec.RequirePublished(t,
		heraldtest.Event{Key: "a", JSON: `{"n":1}`}, heraldtest.Event{Key: "a", JSON: `{"n":2}`},
		heraldtest.Event{Key: "b"})
	require.Equal(t, 3, got[2].Attempt, "b went through on its third attempt")
	require.Less(t, got[0].Seq, got[1].Seq)
	rec.RequireNotPublished(t, heraldtest.Event{Key: "c"})

	dead, err := store.ListEvents(ctx, heraldadmin.EventFilter{All: true, State: heraldadmin.StateDead})
	require.NoError(t, err)
	require.Len(t, dead, 1)
	require.Equal(t, "c", dead[0].Key)
	require.True(t, dead[0].Parked, "c, 2 waits behind the dead c, 1")
}
