package herald_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// rescuingStore is a fakeStore whose rescuer finds three expired rows once.
type rescuingStore struct {
	*fakeStore
	once    sync.Once
	rescued chan struct{} // closed once the three rows are reported
}

func (s *rescuingStore) RescueExpired(context.Context, int) (n int, err error) {
	s.once.Do(func() { n = 3; close(s.rescued) })
	return n, nil
}

// observeOneRun runs a relay with obs as its Observer until it has claimed,
// published and acknowledged one batch of two events and rescued three
// rows, then stops it: every hook has had its event by then.
func observeOneRun(t *testing.T, obs herald.Observer) {
	t.Helper()
	var once sync.Once
	acked := make(chan struct{})
	store := &rescuingStore{rescued: make(chan struct{}), fakeStore: &fakeStore{
		ClaimFunc: func(context.Context, herald.ClaimParams) (batch []herald.Envelope, err error) {
			once.Do(func() {
				batch = []herald.Envelope{
					{Message: herald.Message{ID: "a", Topic: "t"}, Attempt: 1},
					{Message: herald.Message{ID: "b", Topic: "t"}, Attempt: 1},
				}
			})
			return batch, nil
		},
		CompleteFunc: func(_ context.Context, p herald.CompleteParams) (herald.CompleteResult, error) {
			close(acked)
			return herald.CompleteResult{Published: len(p.Published)}, nil
		},
	}}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler), Observer: obs,
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	for _, ch := range []chan struct{}{acked, store.rescued} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the relay neither acknowledged its batch nor rescued rows in 10s")
		}
	}
	// Stop returns once every batch is settled, its hooks called.
	require.NoError(t, relay.Stop(context.Background()))
}

// claimedOnly, acknowledgedOnly and rescuedOnly implement one hook each:
// each must hear exactly its own events, and the relay pass over the
// others.
type claimedOnly struct {
	mu    sync.Mutex
	sizes []int
}

func (o *claimedOnly) Claimed(batch []herald.Envelope) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.sizes = append(o.sizes, len(batch))
}

type acknowledgedOnly struct {
	mu        sync.Mutex
	published []string
}

func (o *acknowledgedOnly) Acknowledged(a herald.Acknowledgement) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range a.Published {
		o.published = append(o.published, e.ID)
	}
}

type rescuedOnly struct {
	mu      sync.Mutex
	rescued []int
}

func (o *rescuedOnly) Rescued(n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.rescued = append(o.rescued, n)
}

func TestAnObserverHearsOnlyTheHooksItImplements(t *testing.T) {
	t.Parallel()
	t.Run("ClaimedOnly", func(t *testing.T) {
		t.Parallel()
		obs := &claimedOnly{}
		observeOneRun(t, obs)
		require.Equal(t, []int{2}, obs.sizes)
	})
	t.Run("AcknowledgedOnly", func(t *testing.T) {
		t.Parallel()
		obs := &acknowledgedOnly{}
		observeOneRun(t, obs)
		require.Equal(t, []string{"a", "b"}, obs.published)
	})
	t.Run("RescuedOnly", func(t *testing.T) {
		t.Parallel()
		obs := &rescuedOnly{}
		observeOneRun(t, obs)
		require.Equal(t, []int{3}, obs.rescued)
	})
}

// misnamed was meant as a RescuedHook, but its method's name is wrong.
type misnamed struct{}

func (misnamed) Rescue(int) {}

func TestNewRelayRefusesAnObserverWithNoHook(t *testing.T) {
	t.Parallel()
	for _, obs := range []herald.Observer{misnamed{}, struct{}{}, 42} {
		_, err := herald.NewRelay(&herald.RelayConfig{
			Store: &fakeStore{}, Observer: obs,
			Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
		})
		require.ErrorContains(t, err, "RelayConfig.Observer")
		require.ErrorContains(t, err, "implements none of herald.ClaimedHook")
	}
}
