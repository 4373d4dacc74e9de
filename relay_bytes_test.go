package herald_test

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
)

// The relay holds no more than MaxInFlightBytes of claimed events (plus
// one event per concurrent claim, as a claim always takes its first row):
// each claim reserves a share of what is left, and none is made while
// nothing is.
func TestRelayBoundsTheBytesItHoldsClaimed(t *testing.T) {
	t.Parallel()
	const (
		events    = 60
		size      = 100_000
		maxBytes  = 350_000
		batchSize = 100
	)
	var (
		mu      sync.Mutex
		backlog []herald.Envelope
		relay   *herald.Relay
		bad     []string
	)
	for range events {
		backlog = append(backlog, herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t", Payload: make([]byte, size)}, Attempt: 1})
	}
	store := &fakeStore{
		ClaimFunc: func(_ context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
			mu.Lock()
			defer mu.Unlock()
			// What the relay holds includes this claim's reservation (and
			// a concurrent claim's): never more than the bound, plus the
			// one event each claim may take past its reservation.
			held := relay.InFlightBytes()
			if p.MaxBytes <= 0 || p.MaxBytes > maxBytes/4 || held > maxBytes+2*size {
				bad = append(bad, fmt.Sprintf("claim asked for %d bytes holding %d", p.MaxBytes, held))
			}
			var batch []herald.Envelope
			var taken int64
			for len(backlog) > 0 && len(batch) < p.Limit && (p.MaxBytes == 0 || taken < p.MaxBytes) {
				batch, backlog = append(batch, backlog[0]), backlog[1:]
				taken += size
			}
			return batch, nil
		},
	}
	batches := make(chan []herald.Envelope)
	answer := make(chan error)
	var err error
	relay, err = herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler), BatchSize: batchSize, MaxInFlight: 4,
		MaxInFlightBytes: maxBytes, PollInterval: time.Millisecond, IdlePollInterval: time.Millisecond,
		Publisher: herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
			select {
			case batches <- batch:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case err := <-answer:
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(t.Context()))
	defer func() { require.NoError(t, relay.Stop(context.Background())) }()

	published, largest := 0, 0
	for published < events {
		batch := <-batches
		require.LessOrEqual(t, relay.InFlightBytes(), int64(maxBytes+2*size),
			"held bytes exceed the bound by more than one event per concurrent claim")
		largest = max(largest, len(batch))
		published += len(batch)
		answer <- nil
	}
	require.LessOrEqual(t, largest, maxBytes/size+1, "batches shrink to the byte bound")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, bad)
	require.Empty(t, backlog)
}

// A negative MaxInFlightBytes turns the bound off: claims carry no bound.
func TestRelayWithoutAByteBoundClaimsUnbounded(t *testing.T) {
	t.Parallel()
	asked := make(chan int64, 1)
	store := &fakeStore{ClaimFunc: func(_ context.Context, p herald.ClaimParams) ([]herald.Envelope, error) {
		select {
		case asked <- p.MaxBytes:
		default:
		}
		return nil, errors.New("no rows today")
	}}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Logger: slog.New(slog.DiscardHandler), MaxInFlightBytes: -1,
		Publisher: herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }),
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(t.Context()))
	require.Zero(t, <-asked)
	require.NoError(t, relay.Stop(context.Background()))
}
