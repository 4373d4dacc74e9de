package herald_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// beatStore is a fakeStore that takes heartbeats: it remembers every beat
// and every Gone, in order. BeatFunc, when set, answers each beat.
type beatStore struct {
	fakeStore
	BeatFunc func(b herald.RelayBeat) error

	mu    sync.Mutex
	beats []herald.RelayBeat
	log   []string // "beat" and "gone owner", in the order they came
}

func (s *beatStore) Beat(_ context.Context, b herald.RelayBeat) error {
	s.mu.Lock()
	s.beats = append(s.beats, b)
	s.log = append(s.log, "beat")
	s.mu.Unlock()
	if s.BeatFunc != nil {
		return s.BeatFunc(b)
	}
	return nil
}

func (s *beatStore) Gone(_ context.Context, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, "gone "+owner)
	return nil
}

func (s *beatStore) beatCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.beats)
}

func (s *beatStore) lastBeat() herald.RelayBeat {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beats[len(s.beats)-1]
}

func (s *beatStore) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.log...)
}

// awaitBeat waits for the n-th beat, and for the heartbeat loop to wait
// for the next one on clock (the only wait of exactly interval), so that
// the test's next Advance reaches it; it returns the beat.
func (s *beatStore) awaitBeat(t *testing.T, clock *fakeClock, interval time.Duration, n int) herald.RelayBeat {
	t.Helper()
	require.Eventually(t, func() bool { return s.beatCount() >= n && clock.waitsFor(interval) },
		5*time.Second, time.Millisecond, "beat %d", n)
	require.Equal(t, n, s.beatCount(), "one beat per interval, no more")
	return s.lastBeat()
}

// waitsFor reports whether something waits on the clock for exactly d.
func (c *fakeClock) waitsFor(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.at.Equal(c.now.Add(d)) {
			return true
		}
	}
	return false
}

// A relay beats when it starts and every HeartbeatInterval by its clock,
// saying what it holds, what it published and when it last claimed
// events; it removes its row when it stops, after its last beat.
func TestRelayBeatsOnStartAndEveryIntervalAndIsGoneOnStop(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	const every = 7 * time.Second // no other loop of the relay waits as long
	var offer atomic.Bool
	store := &beatStore{}
	store.ClaimFunc = func(context.Context, herald.ClaimParams) ([]herald.Envelope, error) {
		if offer.CompareAndSwap(true, false) {
			return []herald.Envelope{env("e1", "t", ""), env("e2", "t", "")}, nil
		}
		return nil, nil
	}
	release := make(chan struct{})
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Clock: clock, Owner: "host-a/7", Logger: slog.New(slog.DiscardHandler), HeartbeatInterval: every,
		Publisher: herald.PublisherFunc(func(ctx context.Context, _ []herald.Envelope) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))

	first := store.awaitBeat(t, clock, every, 1)
	require.Equal(t, "host-a/7", first.Owner)
	require.NotEmpty(t, first.Version)
	require.True(t, first.First)
	require.Zero(t, first.Running)
	require.Negative(t, first.SinceClaim, "no claim has taken events yet")
	require.Zero(t, first.Leased)
	require.Zero(t, first.Published)
	require.Equal(t, 10*every, first.Expiry)

	offer.Store(true)
	clock.Advance(time.Second) // the idle poll: the relay claims two events, and holds them
	require.Eventually(t, func() bool { return relay.InFlight() == 2 }, 5*time.Second, time.Millisecond)
	require.Equal(t, 1, store.beatCount(), "no beat before the interval has passed")

	clock.Advance(every - time.Second)
	second := store.awaitBeat(t, clock, every, 2)
	require.False(t, second.First)
	require.Equal(t, every, second.Running)
	require.Equal(t, every-time.Second, second.SinceClaim, "the claim was at 1s")
	require.Equal(t, int64(2), second.Leased)
	require.Zero(t, second.Published)

	close(release)
	require.Eventually(t, func() bool { return relay.Stats().Published == 2 }, 5*time.Second, time.Millisecond)
	clock.Advance(every)
	third := store.awaitBeat(t, clock, every, 3)
	require.Equal(t, 2*every, third.Running)
	require.Equal(t, 2*every-time.Second, third.SinceClaim)
	require.Zero(t, third.Leased)
	require.Equal(t, int64(2), third.Published)

	require.NoError(t, relay.Stop(context.Background()))
	require.Equal(t, []string{"beat", "beat", "beat", "gone host-a/7"}, store.calls())
}

// A database that refuses heartbeats costs the relay nothing but a warning
// a minute: events are still claimed and published.
func TestFailingHeartbeatsNeverDisturbRelaying(t *testing.T) {
	t.Parallel()
	// An interval no other loop of the relay waits for (the relay's own
	// retries wait whole seconds), so that awaitBeat's "a wait of exactly
	// every" is the heartbeat loop's.
	const every = 1300 * time.Millisecond
	clock := newFakeClock()
	var (
		offer atomic.Bool
		log   logBuffer
	)
	offer.Store(true)
	store := &beatStore{BeatFunc: func(herald.RelayBeat) error {
		return errors.New("failed to connect to postgres://herald:s3cret@127.0.0.1:1/db")
	}}
	store.ClaimFunc = func(context.Context, herald.ClaimParams) ([]herald.Envelope, error) {
		if offer.CompareAndSwap(true, false) {
			return []herald.Envelope{env("e1", "t", "")}, nil
		}
		return nil, nil
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Clock: clock, HeartbeatInterval: every, Logger: slog.New(slog.NewTextHandler(&log, nil)),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	defer func() { require.NoError(t, relay.Stop(context.Background())) }()

	require.Eventually(t, func() bool { return relay.Stats().Published == 1 }, 5*time.Second, time.Millisecond,
		"the event is published while every beat fails")
	warnings := func() int { return strings.Count(log.String(), "writing the relay's heartbeat failed") }
	store.awaitBeat(t, clock, every, 1)
	require.Eventually(t, func() bool { return warnings() == 1 }, 5*time.Second, time.Millisecond)
	for n := 2; n <= 47; n++ { // 46 more beats: 59.8s, still within the minute
		clock.Advance(every)
		store.awaitBeat(t, clock, every, n)
	}
	require.Equal(t, 1, warnings(), "one warning a minute at most")
	offer.Store(true)
	clock.Advance(every) // past a minute after the first warning
	store.awaitBeat(t, clock, every, 48)
	require.Eventually(t, func() bool { return warnings() == 2 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return relay.Stats().Published == 2 }, 5*time.Second, time.Millisecond)
	require.NotContains(t, log.String(), "s3cret")
	require.Empty(t, relay.Health().Database, "failing heartbeats are no database outage of the relay's")
}

// A negative HeartbeatInterval turns heartbeats off: no beat, and no row
// to remove on Stop.
func TestHeartbeatsCanBeTurnedOff(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := &beatStore{}
	claimed := make(chan struct{}, 1)
	store.ClaimFunc = func(context.Context, herald.ClaimParams) ([]herald.Envelope, error) {
		select {
		case claimed <- struct{}{}:
		default:
		}
		return nil, nil
	}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Clock: clock, HeartbeatInterval: -1, Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	<-claimed
	clock.Advance(time.Minute)
	<-claimed // the relay ran past several default intervals
	require.NoError(t, relay.Stop(context.Background()))
	require.Empty(t, store.calls())
}

// Unset, the interval is DefaultHeartbeatInterval, 5s, and a relay stays
// listed ten intervals after its last beat.
func TestHeartbeatIntervalDefaultsToFiveSeconds(t *testing.T) {
	t.Parallel()
	require.Equal(t, 5*time.Second, herald.DefaultHeartbeatInterval)
	store := &beatStore{}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Clock: newFakeClock(), Logger: slog.New(slog.DiscardHandler),
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	require.Eventually(t, func() bool { return store.beatCount() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, relay.Stop(context.Background()))
	require.Equal(t, 50*time.Second, store.lastBeat().Expiry)
}
