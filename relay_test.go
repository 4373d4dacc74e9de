package herald_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	// Relays start goroutines; every one must be gone when they stop.
	goleak.VerifyTestMain(m)
}

// fakeStore is a herald.Store whose methods are function fields, for tests
// of the relay loop without a database. Nil fields do nothing.
type fakeStore struct {
	ClaimFunc        func(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error)
	CompleteFunc     func(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error)
	ReleaseClaimFunc func(ctx context.Context, token string) (int, error)
	PausesFunc       func(ctx context.Context) ([]herald.Pause, error)
	ReadyTopicsFunc  func(ctx context.Context) ([]string, error)
}

func (f *fakeStore) Migrate(context.Context) error { return nil }
func (f *fakeStore) Ping(context.Context) error    { return nil }
func (f *fakeStore) Claim(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
	if f.ClaimFunc == nil {
		return nil, nil
	}
	return f.ClaimFunc(ctx, p)
}
func (f *fakeStore) Complete(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
	if f.CompleteFunc == nil {
		return herald.CompleteResult{Published: len(p.Published), Failed: failedIDs(p)}, nil
	}
	return f.CompleteFunc(ctx, p)
}
func (f *fakeStore) ReleaseClaim(ctx context.Context, token string) (int, error) {
	if f.ReleaseClaimFunc == nil {
		return 0, nil
	}
	return f.ReleaseClaimFunc(ctx, token)
}
func (f *fakeStore) RescueExpired(context.Context, int) (int, error) { return 0, nil }
func (f *fakeStore) Pauses(ctx context.Context) ([]herald.Pause, error) {
	if f.PausesFunc == nil {
		return nil, nil
	}
	return f.PausesFunc(ctx)
}
func (f *fakeStore) ReadyTopics(ctx context.Context) ([]string, error) {
	if f.ReadyTopicsFunc == nil {
		return nil, nil
	}
	return f.ReadyTopicsFunc(ctx)
}
func (f *fakeStore) DeletePublished(context.Context, time.Duration, int) (int, error) {
	return 0, nil
}

// stuckAtStop starts a relay that claims one event and publishes it to a
// broker that never answers, whose acknowledgements go to complete, and
// returns it once the publish is under way. Its Stop is then past its
// deadline at once, with the batch still in flight.
func stuckAtStop(t *testing.T, grace time.Duration,
	complete func(context.Context, herald.CompleteParams) (herald.CompleteResult, error)) *herald.Relay {
	t.Helper()
	var once sync.Once
	store := &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) (batch []herald.Envelope, err error) {
			once.Do(func() {
				batch = []herald.Envelope{{Message: herald.Message{ID: herald.NewID(), Topic: "t"}, Attempt: 1}}
			})
			return batch, nil
		},
		CompleteFunc: complete,
	}
	publishing := make(chan struct{})
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler), Lease: time.Hour, PublishTimeout: time.Minute,
		StopGrace: grace,
		Publisher: herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			close(publishing)
			<-ctx.Done() // a broker that never answers
			return ctx.Err()
		}),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	<-publishing
	return relay
}

// Past its deadline, Stop gives the store a short grace to release the
// unconfirmed rows, not the whole lease: with the database unreachable at
// shutdown, the rows are left to the rescuer and Stop returns.
func TestStopIsBoundedWhenTheDatabaseIsGoneAtShutdown(t *testing.T) {
	t.Parallel()
	relay := stuckAtStop(t, 0, func(context.Context, herald.CompleteParams) (herald.CompleteResult, error) {
		return herald.CompleteResult{}, errors.New("connection refused")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	require.NoError(t, relay.Stop(ctx))
	// The bound is the release grace (seconds), far below the hour-long lease.
	require.Less(t, time.Since(start), 15*time.Second)
}

// StopGrace is what the database gets, after Stop's deadline, to take the
// outcomes of the batches in flight: one that answers only after longer
// than the default still gets them when the grace is longer.
func TestStopGraceIsTheDatabasesTimeAfterTheDeadline(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		stopped time.Time // when Stop was called; zero before
		written atomic.Bool
	)
	relay := stuckAtStop(t, time.Minute, func(_ context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
		mu.Lock()
		defer mu.Unlock()
		if stopped.IsZero() || time.Since(stopped) < 3*time.Second {
			return herald.CompleteResult{}, errors.New("connection refused")
		}
		written.Store(true)
		return herald.CompleteResult{Failed: failedIDs(p)}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	mu.Lock()
	stopped = time.Now()
	mu.Unlock()
	require.NoError(t, relay.Stop(ctx))
	require.True(t, written.Load(), "the batch's outcome was written within the grace, past the default 2s")

	_, err := herald.NewRelay(&herald.RelayConfig{Store: &fakeStore{}, Publisher: herald.PublisherFunc(nil), StopGrace: -time.Second})
	require.ErrorContains(t, err, "RelayConfig.StopGrace must be positive")
}

// A claim whose answer never came may have committed: once the database
// answers again, the relay releases that claim's rows by its token instead
// of leaving them to wait for their lease.
func TestRelayReleasesAClaimWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	var (
		calls    atomic.Int32
		lost     = make(chan string, 1)
		released = make(chan string, 1)
	)
	store := &fakeStore{
		ClaimFunc: func(_ context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
			if calls.Add(1) == 1 {
				lost <- p.Token
				return nil, errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
			}
			return nil, nil
		},
		ReleaseClaimFunc: func(_ context.Context, token string) (int, error) {
			released <- token
			return 3, nil
		},
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler), PollInterval: time.Millisecond, IdlePollInterval: time.Millisecond,
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(t.Context()))
	defer func() { require.NoError(t, relay.Stop(context.Background())) }()

	token := <-lost
	select {
	case got := <-released:
		require.Equal(t, token, got, "the failed claim's own token is released")
	case <-time.After(10 * time.Second):
		t.Fatal("the lost claim was never released")
	}
	require.Eventually(t, func() bool { return relay.Stats().Released == 3 }, 10*time.Second, time.Millisecond)
}

// An acknowledgement whose COMMIT went through but whose answer was lost is
// retried with the batch's own token; the retry changes nothing, and the
// relay says so accurately instead of blaming a lost lease.
func TestRelayRetriesAnAcknowledgementWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	var (
		once    sync.Once
		mu      sync.Mutex
		tokens  []string
		written = map[string]bool{}
		done    = make(chan struct{})
	)
	event := herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t"}, Attempt: 1}
	store := &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) (batch []herald.Envelope, err error) {
			once.Do(func() { batch = []herald.Envelope{event} })
			return batch, nil
		},
		CompleteFunc: func(_ context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
			mu.Lock()
			defer mu.Unlock()
			tokens = append(tokens, p.Token)
			if len(tokens) == 1 {
				for _, id := range p.Published {
					written[id] = true // committed; the answer never arrives
				}
				return herald.CompleteResult{}, errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
			}
			defer close(done)
			return herald.CompleteResult{}, nil // already written: nothing left to change
		},
	}
	logs := &testenv.LogBuffer{}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(t.Context()))
	<-done
	require.NoError(t, relay.Stop(context.Background()))

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, tokens, 2)
	require.Equal(t, tokens[0], tokens[1], "the retry acknowledges by the batch's own token")
	require.True(t, written[event.ID])
	out := logs.String()
	require.Contains(t, out, "acknowledgement retried; rows it no longer changed were written by an earlier attempt")
	require.NotContains(t, out, "belong to another relay")
}

// A claim that runs out of time is retried for half as many rows: a
// database too slow to claim a whole batch within the claim's deadline
// (Lease/2) still drains, instead of repeating the same cancelled work.
func TestRelayHalvesAClaimThatRanOutOfTime(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	var (
		mu      sync.Mutex
		limits  []int
		backlog []herald.Envelope
	)
	for range 12 {
		backlog = append(backlog, herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t"}, Attempt: 1})
	}
	store := &fakeStore{ClaimFunc: func(ctx context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
		mu.Lock()
		limits = append(limits, p.Limit)
		mu.Unlock()
		if p.Limit > 10 { // more rows than this database claims in time
			<-ctx.Done()
			return nil, fmt.Errorf("claiming: %w", ctx.Err())
		}
		mu.Lock()
		defer mu.Unlock()
		n := min(p.Limit, len(backlog))
		batch := backlog[:n]
		backlog = backlog[n:]
		return batch, nil
	}}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
		BatchSize: 100, ClaimConcurrency: 1, PublishTimeout: time.Second, Lease: 2 * time.Second,
		PollInterval: time.Millisecond, IdlePollInterval: time.Millisecond, OutageBackoffCap: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(t.Context()))
	require.Eventually(t, func() bool { return relay.Stats().Published == 12 }, time.Minute, time.Millisecond)
	require.NoError(t, relay.Stop(context.Background()))

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{100, 50, 25, 12, 6}, limits[:5], "each claim that ran out of time asks for half")
}

// A batch's acknowledgement does not hold its publish slot: with one slot,
// the next batch is claimed and published while the first one's
// acknowledgement waits. And no more than MaxInFlight acknowledgements
// wait at once: the third batch is not published before one of them ends.
func TestRelayPublishesTheNextBatchWhileOneIsAcknowledged(t *testing.T) {
	t.Parallel()
	var (
		mu        sync.Mutex
		claims    int
		published int
	)
	secondSent := make(chan struct{})
	thirdSent := make(chan struct{})
	release := make(chan struct{})
	store := &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) ([]herald.Envelope, error) {
			mu.Lock()
			defer mu.Unlock()
			if claims == 3 {
				return nil, nil
			}
			claims++
			return []herald.Envelope{{Message: herald.Message{ID: herald.NewID(), Topic: "t"}, Attempt: 1}}, nil
		},
		CompleteFunc: func(ctx context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return herald.CompleteResult{}, ctx.Err()
			}
			return herald.CompleteResult{Published: len(p.Published)}, nil
		},
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			published++
			switch published {
			case 2:
				close(secondSent)
			case 3:
				close(thirdSent)
			}
			return nil
		}),
		MaxInFlight: 1, BatchSize: 1, PublishTimeout: 5 * time.Second, Lease: 30 * time.Second,
		PollInterval: time.Millisecond, IdlePollInterval: time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(t.Context()))
	select {
	case <-secondSent:
	case <-time.After(10 * time.Second):
		t.Fatal("the second batch was not published while the first one's acknowledgement waited")
	}
	// Two batches wait for their acknowledgement now: the first, and the
	// second, which holds the slot until the first is done.
	select {
	case <-thirdSent:
		t.Fatal("a third batch was published while MaxInFlight acknowledgements were waiting")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	require.Eventually(t, func() bool { return relay.Stats().Published == 3 }, 10*time.Second, time.Millisecond)
	require.NoError(t, relay.Stop(context.Background()))
}
