package herald_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// logBuffer collects a relay's log lines from its goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// relayOnce runs a relay over a fake store that hands out batch once, and
// returns what the relay acknowledged, what the publisher was given and the
// relay's log.
func relayOnce(t *testing.T, batch []herald.Envelope, cfg herald.RelayConfig,
	publish func(batch []herald.Envelope) error) (herald.CompleteParams, []herald.Envelope, string) {
	t.Helper()
	var (
		once      sync.Once
		completed = make(chan herald.CompleteParams, 1)
		sent      []herald.Envelope
		log       logBuffer
	)
	cfg.Store = &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) (out []herald.Envelope, err error) {
			once.Do(func() { out = batch })
			return out, nil
		},
		CompleteFunc: func(_ context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
			completed <- p
			return herald.CompleteResult{Published: len(p.Published), Failed: failedIDs(p)}, nil
		},
	}
	cfg.Publisher = herald.PublisherFunc(func(_ context.Context, b []herald.Envelope) error {
		sent = append(sent, b...)
		return publish(b)
	})
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	relay, err := herald.NewRelay(&cfg)
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	var p herald.CompleteParams
	select {
	case p = <-completed:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never acknowledged the batch")
	}
	require.NoError(t, relay.Stop(context.Background()))
	return p, sent, log.String()
}

func env(id, topic, key string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: id, Topic: topic, Key: key, Payload: []byte("{}")}, Attempt: 1}
}

func failedIDs(p herald.CompleteParams) []string {
	ids := make([]string, len(p.Failed))
	for i, f := range p.Failed {
		ids[i] = f.ID
	}
	return ids
}

func failureOf(p herald.CompleteParams, id string) herald.Failure {
	for _, f := range p.Failed {
		if f.ID == id {
			return f
		}
	}
	return herald.Failure{}
}

func TestRelayHoldsBackTheRestOfAFailedKey(t *testing.T) {
	t.Parallel()
	batch := []herald.Envelope{env("a1", "t", "a"), env("b1", "t", "b"), env("a2", "t", "a"), env("a3", "t", "a")}
	p, _, _ := relayOnce(t, batch, herald.RelayConfig{}, func(b []herald.Envelope) error {
		return &herald.BatchError{Errs: []error{errors.New("nack"), nil, herald.ErrHeldBack, herald.ErrHeldBack}}
	})
	require.Equal(t, []string{"b1"}, p.Published)
	first := failureOf(p, "a1")
	require.Equal(t, herald.OutcomeRetry, first.Outcome, "far from MaxAttempts: retried, and its key waits for it")
	require.Positive(t, first.Delay)
	for _, id := range []string{"a2", "a3"} {
		f := failureOf(p, id)
		require.Equal(t, herald.OutcomeHeldBack, f.Outcome, "%s waits behind a1 without spending an attempt", id)
		require.Zero(t, f.Delay)
	}
}

func TestRelayHoldsBackEvenWhenThePublisherReportsAnotherError(t *testing.T) {
	t.Parallel()
	batch := []herald.Envelope{env("a1", "t", "a"), env("a2", "t", "a")}
	p, _, _ := relayOnce(t, batch, herald.RelayConfig{}, func(b []herald.Envelope) error {
		return &herald.BatchError{Errs: []error{errors.New("nack"), herald.Permanent(errors.New("too large"))}}
	})
	require.Equal(t, herald.OutcomeHeldBack, failureOf(p, "a2").Outcome,
		"after a1 failed, a2's own failure is only a hold: it is tried again behind a1")
}

func TestRelayReportsAPublisherThatBreaksKeyOrder(t *testing.T) {
	t.Parallel()
	batch := []herald.Envelope{env("a1", "t", "a"), env("a2", "t", "a")}
	p, _, log := relayOnce(t, batch, herald.RelayConfig{}, func(b []herald.Envelope) error {
		return &herald.BatchError{Errs: []error{errors.New("nack"), nil}}
	})
	require.Equal(t, []string{"a2"}, p.Published, "a2 is on the broker: it counts as published")
	require.Contains(t, log, "per-key order is broken on the broker")
}

func TestRelayDoesNotSendTheRestOfAKeyBehindAnInvalidRow(t *testing.T) {
	t.Parallel()
	bad := env("a1", "t", "a")
	bad.Headers = map[string]string{"Nats-Msg-Id": "forged"} // written by another program with plain SQL
	batch := []herald.Envelope{bad, env("a2", "t", "a"), env("b1", "t", "b")}
	p, sent, _ := relayOnce(t, batch, herald.RelayConfig{}, func([]herald.Envelope) error { return nil })
	require.Len(t, sent, 1)
	require.Equal(t, "b1", sent[0].ID, "neither the invalid row nor the rest of its key reaches the broker")
	require.Equal(t, herald.OutcomeParked, failureOf(p, "a1").Outcome, "an invalid row is dead, and parks its ordered key")
	require.Equal(t, herald.OutcomeHeldBack, failureOf(p, "a2").Outcome)
}

func TestUnorderedRelayAndTopicsHoldNothingBack(t *testing.T) {
	t.Parallel()
	batch := []herald.Envelope{env("a1", "t", "a"), env("a2", "t", "a"), env("u1", "free", "k"), env("u2", "free", "k"),
		env("s1", "skip", "k"), env("n1", "t", ""), env("n2", "t", "")}
	fail := func(b []herald.Envelope) error {
		errs := make([]error, len(b))
		for i, e := range b {
			switch e.ID {
			case "a1", "u1", "s1", "n1":
				errs[i] = herald.Permanent(errors.New("poison"))
			case "a2": // a publisher keeps its key's order whatever the relay's mode
				errs[i] = herald.ErrHeldBack
			}
		}
		return &herald.BatchError{Errs: errs}
	}
	p, _, _ := relayOnce(t, batch, herald.RelayConfig{UnorderedTopics: []string{"free"}, SkipDeadTopics: []string{"skip"}}, fail)
	require.ElementsMatch(t, []string{"u2", "n2"}, p.Published, "unordered topics and empty keys hold nothing back")
	require.Equal(t, herald.OutcomeHeldBack, failureOf(p, "a2").Outcome)
	require.Equal(t, herald.OutcomeParked, failureOf(p, "a1").Outcome)
	require.Equal(t, herald.OutcomeDead, failureOf(p, "s1").Outcome, "a skip-dead topic does not park its key")
	require.Equal(t, herald.OutcomeDead, failureOf(p, "u1").Outcome)

	p, _, _ = relayOnce(t, batch, herald.RelayConfig{Unordered: true}, fail)
	require.ElementsMatch(t, []string{"u2", "n2"}, p.Published)
	require.Equal(t, herald.OutcomeDead, failureOf(p, "a1").Outcome, "an unordered relay parks no key")
	require.Equal(t, herald.OutcomeHeldBack, failureOf(p, "a2").Outcome, "what the publisher held back costs no attempt")
}

func TestRelayDoesNotPublishABatchWhoseLeaseExpired(t *testing.T) {
	t.Parallel()
	var log logBuffer
	var once sync.Once
	clock := newFakeClock()
	const lease = time.Minute
	published := make(chan struct{}, 1)
	store := &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) (out []herald.Envelope, err error) {
			once.Do(func() {
				// The claim itself outlives the lease: the process was
				// paused, or the database slow.
				clock.Advance(lease + time.Second)
				out = []herald.Envelope{env("a1", "t", "a")}
			})
			return out, nil
		},
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Lease: lease, PublishTimeout: time.Second, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error {
			published <- struct{}{}
			return nil
		}),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	require.Eventually(t, func() bool { return strings.Contains(log.String(), "lease expired before publishing") },
		5*time.Second, time.Millisecond)
	require.NoError(t, relay.Stop(context.Background()))
	require.Empty(t, published, "nothing was published")
}

// fakeClock is a herald.Clock that moves only when told to.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock by d and wakes the waits that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// pendingWithin reports whether something waits on the clock for at most d.
func (c *fakeClock) pendingWithin(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if !w.at.After(c.now.Add(d)) {
			return true
		}
	}
	return false
}

// An outage pauses claiming until the relay's clock says the pause is over:
// the test moves time instead of waiting for it.
func TestOutagePausesClaimsUntilTheClockMoves(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var (
		claims atomic.Int64
		log    logBuffer
	)
	store := &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) ([]herald.Envelope, error) {
			n := claims.Add(1)
			return []herald.Envelope{env(fmt.Sprintf("e%d", n), "t", "")}, nil
		},
		CompleteFunc: func(_ context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
			return herald.CompleteResult{Failed: failedIDs(p)}, nil
		},
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Clock: clock, MaxInFlight: 1, BatchSize: 1, OutageBackoffCap: time.Second,
		Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error {
			return errors.New("dial tcp 127.0.0.1:4222: connection refused")
		}),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	defer func() { require.NoError(t, relay.Stop(context.Background())) }()

	// The first publish fails as a whole: the relay pauses 100ms by its
	// clock before claiming again.
	require.Eventually(t, func() bool {
		return strings.Contains(log.String(), "destination unreachable; pausing claims") && clock.pendingWithin(100*time.Millisecond)
	}, 5*time.Second, time.Millisecond)
	before := claims.Load()
	require.False(t, clock.pendingWithin(99*time.Millisecond), "the pause is 100ms")
	require.Equal(t, before, claims.Load(), "no claim while the clock stands still")

	clock.Advance(100 * time.Millisecond)
	require.Eventually(t, func() bool { return claims.Load() > before }, 5*time.Second, time.Millisecond,
		"claiming resumes once the pause has passed")
	require.Equal(t, "dial tcp 127.0.0.1:4222: connection refused", relay.Health().Destination)
}
