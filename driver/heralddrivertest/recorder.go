package heralddrivertest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// Recorder is a Publisher that records every confirmed delivery, for the
// relay cases of the suite and drivers' own relay tests. Fail, when set,
// decides per envelope: a non-nil error fails that envelope and holds back
// the later events of its key in the batch, as the Publisher contract
// asks. Set Fail before the relay starts.
type Recorder struct {
	Fail func(env herald.Envelope, attempt int) error

	mu        sync.Mutex
	delivered map[string]int
	envs      map[string]herald.Envelope
	attempts  map[string]int
	order     []string // ids in delivery order
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{delivered: map[string]int{}, envs: map[string]herald.Envelope{}, attempts: map[string]int{}}
}

// Publish implements herald.Publisher.
func (r *Recorder) Publish(_ context.Context, batch []herald.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	errs := make([]error, len(batch))
	failed := false
	failedKeys := map[string]bool{}
	for i, env := range batch {
		if env.Key != "" && failedKeys[env.Key] {
			errs[i] = herald.ErrHeldBack
			continue
		}
		r.attempts[env.ID]++
		if r.Fail != nil {
			if err := r.Fail(env, r.attempts[env.ID]); err != nil {
				errs[i], failed = err, true
				failedKeys[env.Key] = true
				continue
			}
		}
		r.delivered[env.ID]++
		r.envs[env.ID] = env
		r.order = append(r.order, env.ID)
	}
	if failed {
		return &herald.BatchError{Errs: errs}
	}
	return nil
}

// Count returns how many times id was delivered.
func (r *Recorder) Count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.delivered[id]
}

// Env returns the envelope of id's last delivery.
func (r *Recorder) Env(id string) herald.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.envs[id]
}

// Order returns every delivery, in order: an id delivered twice appears
// twice.
func (r *Recorder) Order() []herald.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]herald.Envelope, len(r.order))
	for i, id := range r.order {
		out[i] = r.envs[id]
	}
	return out
}

// OrderOf returns the delivered ids among ids, in delivery order.
func (r *Recorder) OrderOf(ids ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, id := range r.order {
		for _, want := range ids {
			if strings.EqualFold(id, want) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// Total returns how many distinct events were delivered and how many
// deliveries were duplicates.
func (r *Recorder) Total() (distinct, duplicates int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.delivered {
		distinct++
		duplicates += n - 1
	}
	return distinct, duplicates
}

// RequireAllDeliveredOnce waits until every one of ids was delivered, then
// checks that none was delivered twice.
func (r *Recorder) RequireAllDeliveredOnce(t testing.TB, ids []string) {
	t.Helper()
	// The condition resumes where it stopped: a delivered event stays
	// delivered, and reading thousands of ids again on every tick would
	// take the CPU the relays under test need. The deadline bounds a drain
	// of many thousands of events on a loaded machine with the race
	// detector on; it measures nothing.
	next := 0
	require.Eventually(t, func() bool {
		for next < len(ids) && r.Count(ids[next]) > 0 {
			next++
		}
		return next == len(ids)
	}, 3*time.Minute, 10*time.Millisecond, "not every event was delivered")
	for _, id := range ids {
		require.Equal(t, 1, r.Count(id), "event %s delivered more than once", id)
	}
}

// StartRelay starts a relay on store with test timings (short polls,
// leases and backoff), changed by mod when it is not nil, and stops it at
// the end of the test.
func StartRelay(t testing.TB, store herald.Store, pub herald.Publisher, mod func(*herald.RelayConfig)) *herald.Relay {
	t.Helper()
	cfg := &herald.RelayConfig{
		Store:            store,
		Publisher:        pub,
		Logger:           Logger(t),
		BatchSize:        100,
		PollInterval:     2 * time.Millisecond,
		IdlePollInterval: 20 * time.Millisecond,
		RescueInterval:   50 * time.Millisecond,
		Lease:            10 * time.Second,
		PublishTimeout:   5 * time.Second,
		Retry:            herald.RetryPolicy{Base: 20 * time.Millisecond, Cap: 100 * time.Millisecond, MaxAttempts: 5, MaxAge: time.Hour},
		OutageBackoffCap: 50 * time.Millisecond,
	}
	if mod != nil {
		mod(cfg)
	}
	r, err := herald.NewRelay(cfg)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// Logger sends a relay's warnings and errors to the test's output.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}
