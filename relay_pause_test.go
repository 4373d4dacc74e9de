package herald_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// pauseStore is a fake store whose pauses a test sets, and which records
// the paused topics of every claim.
type pauseStore struct {
	fakeStore
	mu      sync.Mutex
	pauses  []herald.Pause
	ready   []string
	failing bool
	reads   atomic.Int64
	claims  [][]string // PausedTopics of each claim, in order
}

func newPauseStore() *pauseStore {
	s := &pauseStore{}
	s.PausesFunc = func(context.Context) ([]herald.Pause, error) {
		s.reads.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.failing {
			return nil, errors.New("connection refused")
		}
		return slices.Clone(s.pauses), nil
	}
	s.ReadyTopicsFunc = func(context.Context) ([]string, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Clone(s.ready), nil
	}
	s.ClaimFunc = func(_ context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.claims = append(s.claims, slices.Clone(p.PausedTopics))
		return nil, nil
	}
	return s
}

func (s *pauseStore) set(ps ...herald.Pause) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pauses = ps
}

// lastClaim returns how many claims ran and the paused topics of the last.
func (s *pauseStore) lastClaim() (int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.claims) == 0 {
		return 0, nil
	}
	return len(s.claims), s.claims[len(s.claims)-1]
}

// A relay reads the pauses at most once per PauseRefresh of its clock, and
// every claim after a read leaves the paused topics alone: a pause, and a
// resume, take effect within the refresh interval, not before.
func TestRelayHonoursPausesWithinTheRefreshInterval(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := newPauseStore()
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Clock: clock, MaxInFlight: 1, Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
		DestinationOf: func(topic string) string {
			if topic == "orders.placed" {
				return "kafka"
			}
			return "webhook"
		},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	defer func() { require.NoError(t, relay.Stop(context.Background())) }()

	// claimAfter wakes the relay and returns a claim that began after
	// the call: with one claim loop, the second claim to end from now.
	claimAfter := func() []string {
		t.Helper()
		n, _ := store.lastClaim()
		var (
			got    int
			paused []string
		)
		require.Eventually(t, func() bool {
			relay.Wake()
			got, paused = store.lastClaim()
			return got > n+1
		}, 5*time.Second, time.Millisecond)
		return paused
	}
	paused := claimAfter()
	require.Empty(t, paused)
	require.EqualValues(t, 1, store.reads.Load())

	store.set(herald.Pause{Kind: herald.PauseTopic, Name: "users", Paused: true})
	clock.Advance(herald.PauseRefresh - time.Millisecond)
	paused = claimAfter()
	require.Empty(t, paused, "within the refresh interval, the relay claims on what it read")
	require.EqualValues(t, 1, store.reads.Load(), "and does not read the pauses again")

	clock.Advance(time.Millisecond)
	paused = claimAfter()
	require.Equal(t, []string{"users"}, paused, "once the interval has passed, the pause holds every claim")
	require.EqualValues(t, 2, store.reads.Load())

	// A paused destination holds the topics with ready events that route
	// to it.
	store.mu.Lock()
	store.ready = []string{"orders.placed", "payments"}
	store.mu.Unlock()
	store.set(herald.Pause{Kind: herald.PauseTopic, Name: "users", Paused: true},
		herald.Pause{Kind: herald.PauseDestination, Name: "kafka", Paused: true})
	clock.Advance(herald.PauseRefresh)
	paused = claimAfter()
	require.Equal(t, []string{"orders.placed", "users"}, paused)
	require.Equal(t, paused, relay.Paused(), "the relay says what it holds")

	// A resume releases within the interval too.
	store.set(herald.Pause{Kind: herald.PauseTopic, Name: "users", Resumed: clock.Now()})
	clock.Advance(herald.PauseRefresh)
	paused = claimAfter()
	require.Empty(t, paused)

	// Unable to read the pauses, the relay does not claim: it could
	// publish what an operator paused.
	store.mu.Lock()
	store.failing = true
	store.mu.Unlock()
	clock.Advance(herald.PauseRefresh)
	failedReads := func(after int64) int64 {
		var reads int64
		require.Eventually(t, func() bool { relay.Wake(); reads = store.reads.Load(); return reads > after }, 5*time.Second, time.Millisecond)
		return reads
	}
	reads := failedReads(store.reads.Load())
	before, _ := store.lastClaim()
	failedReads(reads + 1)
	after, _ := store.lastClaim()
	require.Equal(t, before, after, "no claim without the pauses")
	require.Eventually(t, func() bool { return relay.Health().Database != "" }, 5*time.Second, time.Millisecond,
		"and says the database does not answer")
}
