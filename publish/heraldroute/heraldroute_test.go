package heraldroute

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// sink is a destination's publisher for tests: it records what it got and
// answers with Fail when set.
type sink struct {
	mu    sync.Mutex
	got   []herald.Envelope
	calls atomic.Int64
	Fail  func(ctx context.Context, batch []herald.Envelope) error
}

func (s *sink) Publish(ctx context.Context, batch []herald.Envelope) error {
	s.calls.Add(1)
	if s.Fail != nil {
		if err := s.Fail(ctx, batch); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got = append(s.got, batch...)
	return nil
}

func (s *sink) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for _, e := range s.got {
		ids = append(ids, e.ID)
	}
	return ids
}

func ev(id, topic, key string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: id, Topic: topic, Key: key, Payload: []byte("{}")}, Attempt: 1}
}

func newRouter(t *testing.T, cfg Config) (*Router, *bytes.Buffer) {
	t.Helper()
	var log bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	r, err := New(&cfg)
	require.NoError(t, err)
	return r, &log
}

func TestRoutesPickTheDestination(t *testing.T) {
	t.Parallel()
	a, b, c := &sink{}, &sink{}, &sink{}
	r, log := newRouter(t, Config{
		Destinations: []Destination{{Name: "a", Publisher: a}, {Name: "b", Publisher: b}, {Name: "c", Publisher: c}},
		Routes: []Route{
			{Topic: "orders.*", Destination: "b"},
			{Topic: "orders.placed", Destination: "a"}, // exact names win over patterns
			{Topic: "billing.>", Destination: "c"},
			{Topic: "orders.*", Destination: "c"}, // the first matching pattern wins
		},
	})
	batch := []herald.Envelope{ev("1", "orders.placed", "k"), ev("2", "orders.paid", "k"), ev("3", "billing.eu.invoiced", "k"),
		ev("4", "billing", "k"), ev("5", "orders.eu.paid", "k")}
	err := r.Publish(t.Context(), batch)
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.Equal(t, []string{"1"}, a.ids())
	require.Equal(t, []string{"2"}, b.ids())
	require.Equal(t, []string{"3"}, c.ids())
	for _, i := range []int{3, 4} {
		require.ErrorContains(t, be.Errs[i], "no route matches topic")
		require.False(t, herald.IsPermanent(be.Errs[i]), "a missing route is fixed by configuration: retried, not dead")
	}
	require.Equal(t, 2, bytes.Count(log.Bytes(), []byte("no route matches topic")), "one line per topic")

	r2, _ := newRouter(t, Config{Destinations: []Destination{{Name: "a", Publisher: a}}, Default: "a"})
	require.NoError(t, r2.Publish(t.Context(), []herald.Envelope{ev("6", "anything", "")}))
	require.Contains(t, a.ids(), "6", "the default takes what no route matches")
}

// DestinationOf, which a destination's pause relies on, names the
// destination Publish sends a topic to.
func TestDestinationOfNamesWherePublishSendsATopic(t *testing.T) {
	t.Parallel()
	a, b := &sink{}, &sink{}
	dests := []Destination{{Name: "a", Publisher: a}, {Name: "b", Publisher: b}}
	routes := []Route{{Topic: "orders.*", Destination: "b"}, {Topic: "orders.placed", Destination: "a"}}
	r, _ := newRouter(t, Config{Destinations: dests, Routes: routes})
	for topic, want := range map[string]string{"orders.placed": "a", "orders.paid": "b", "billing": ""} {
		require.Equal(t, want, r.DestinationOf(topic), topic)
	}
	r, _ = newRouter(t, Config{Destinations: dests, Routes: routes, Default: "a"})
	require.Equal(t, "a", r.DestinationOf("billing"), "the default takes what no route matches")
}

func TestBadConfigNamesTheField(t *testing.T) {
	t.Parallel()
	p := &sink{}
	for _, tc := range []struct {
		cfg  *Config
		want string
	}{
		{nil, "Config.Destinations"},
		{&Config{Destinations: []Destination{{Publisher: p}}}, "Destinations[0].Name is required"},
		{&Config{Destinations: []Destination{{Name: "a"}}}, "Destinations[0].Publisher is required"},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p}, {Name: "a", Publisher: p}}}, `Destinations[1].Name "a" is used twice`},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p}}, Routes: []Route{{Topic: "x", Destination: "b"}}}, `Routes[0].Destination "b"`},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p}}, Routes: []Route{{Topic: "a.>.b", Destination: "a"}}}, "Routes[0].Topic"},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p}}, Routes: []Route{{Topic: "[", Destination: "a"}}}, "Routes[0].Topic"},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p}}, Routes: []Route{{Topic: "orders>", Destination: "a"}}}, "> must be a token of its own"},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p}}, Default: "z"}, `Config.Default "z"`},
		{&Config{Destinations: []Destination{{Name: "a", Publisher: p, Timeout: -1}}}, "Destinations[0]"},
	} {
		_, err := New(tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestDebeziumRouteReshapesEvents(t *testing.T) {
	t.Parallel()
	a := &sink{}
	r, _ := newRouter(t, Config{Destinations: []Destination{{Name: "kafka", Publisher: a}},
		Routes: []Route{{Topic: "orders.*", Destination: "kafka", Debezium: true}}})
	e := ev("e1", "orders.placed", "ignored")
	e.AggregateType, e.AggregateID, e.Type = "order", "order-42", "OrderPlaced"
	e.Headers = map[string]string{"traceparent": "00-abc"}
	require.NoError(t, r.Publish(t.Context(), []herald.Envelope{e}))
	got := a.got[0]
	require.Equal(t, "outbox.event.order", got.Topic)
	require.Equal(t, "order-42", got.Key, "the key is the aggregate id")
	require.Equal(t, map[string]string{"traceparent": "00-abc", "id": "e1", "type": "OrderPlaced"}, got.Headers)
	require.Equal(t, map[string]string{"traceparent": "00-abc"}, e.Headers, "the relay's envelope is not changed")
}

func TestADownDestinationDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	up := &sink{}
	down := &sink{Fail: func(context.Context, []herald.Envelope) error { return errors.New("connection refused") }}
	r, log := newRouter(t, Config{
		Destinations: []Destination{{Name: "up", Publisher: up}, {Name: "down", Publisher: down, FailureThreshold: 2, OpenFor: time.Hour}},
		Routes:       []Route{{Topic: "a", Destination: "up"}, {Topic: "b", Destination: "down"}},
	})
	for i := range 5 {
		err := r.Publish(t.Context(), []herald.Envelope{ev("a", "a", "k"), ev("b", "b", "k")})
		var be *herald.BatchError
		require.ErrorAs(t, err, &be, "round %d", i)
		require.NoError(t, be.Errs[0], "the healthy destination's event is delivered")
		require.True(t, herald.IsUnavailable(be.Errs[1]), "the down destination's event keeps its attempt: %v", be.Errs[1])
	}
	require.EqualValues(t, 2, down.calls.Load(), "after 2 failures in a row the breaker opens: no more calls")
	require.Len(t, up.ids(), 5)
	var ra herald.RetryAfter
	err := r.Publish(t.Context(), []herald.Envelope{ev("a", "a", "k"), ev("b", "b", "k")})
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.ErrorAs(t, be.Errs[1], &ra)
	require.Greater(t, ra.RetryAfter(), 59*time.Minute, "the open breaker says when to come back")
	require.Contains(t, log.String(), "destination down: circuit open")
	st := r.Status()
	require.Contains(t, st[1].LastError, "connection refused", "the down destination's last error")
	require.False(t, st[1].LastErrorAt.IsZero())
	st[1].LastError, st[1].LastErrorAt = "", time.Time{}
	require.Equal(t, []DestinationStatus{{Name: "up", Breaker: "closed"}, {Name: "down", Breaker: "open", Failures: 2}}, st)

	// A batch for the down destination alone: per-event errors still, so
	// that the relay keeps claiming for the healthy one.
	err = r.Publish(t.Context(), []herald.Envelope{ev("b", "b", "k")})
	require.ErrorAs(t, err, new(*herald.BatchError))

	// Every destination down: an outage for the relay.
	r2, _ := newRouter(t, Config{Destinations: []Destination{{Name: "down", Publisher: down, FailureThreshold: 1, OpenFor: time.Hour}}, Default: "down"})
	err = r2.Publish(t.Context(), []herald.Envelope{ev("b", "b", "k")})
	require.Error(t, err)
	require.False(t, errors.As(err, new(*herald.BatchError)), "with every breaker open, an outage: %v", err)
}

func TestBreakerProbesAndClosesWhenTheDestinationIsBack(t *testing.T) {
	t.Parallel()
	var healthy atomic.Bool
	d := &sink{Fail: func(context.Context, []herald.Envelope) error {
		if healthy.Load() {
			return nil
		}
		return errors.New("connection refused")
	}}
	r, log := newRouter(t, Config{Destinations: []Destination{{Name: "d", Publisher: d, FailureThreshold: 1, OpenFor: time.Minute}}, Default: "d"})
	clock := time.Now()
	r.dests["d"].now = func() time.Time { return clock }

	require.Error(t, r.Publish(t.Context(), []herald.Envelope{ev("1", "t", "")}))
	require.Equal(t, "open", r.Status()[0].Breaker)
	clock = clock.Add(2 * time.Minute) // OpenFor passed: the next call probes
	require.Equal(t, "half-open", r.Status()[0].Breaker)
	require.Error(t, r.Publish(t.Context(), []herald.Envelope{ev("2", "t", "")}), "the probe fails: open again")
	require.EqualValues(t, 2, d.calls.Load())
	require.Equal(t, "open", r.Status()[0].Breaker)

	clock = clock.Add(2 * time.Minute)
	healthy.Store(true)
	require.NoError(t, r.Publish(t.Context(), []herald.Envelope{ev("3", "t", "")}))
	require.Equal(t, "closed", r.Status()[0].Breaker)
	require.Contains(t, log.String(), "destination up again: circuit closed")
}

func TestASlowDestinationIsCutOffAndFailsFast(t *testing.T) {
	t.Parallel()
	fast := &sink{}
	slow := &sink{Fail: func(ctx context.Context, _ []herald.Envelope) error {
		<-ctx.Done() // never answers
		return ctx.Err()
	}}
	r, _ := newRouter(t, Config{
		Destinations: []Destination{{Name: "fast", Publisher: fast},
			{Name: "slow", Publisher: slow, Timeout: 20 * time.Millisecond, FailureThreshold: 1, OpenFor: time.Hour}},
		Routes: []Route{{Topic: "f", Destination: "fast"}, {Topic: "s", Destination: "slow"}},
	})
	err := r.Publish(t.Context(), []herald.Envelope{ev("1", "f", "k"), ev("2", "s", "k")})
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.NoError(t, be.Errs[0])
	require.ErrorContains(t, be.Errs[1], "did not answer within 20ms")
	require.True(t, herald.IsUnavailable(be.Errs[1]))

	// The breaker is open: the next batches do not wait for the slow one.
	for range 3 {
		err = r.Publish(t.Context(), []herald.Envelope{ev("3", "f", "k"), ev("4", "s", "k")})
		require.ErrorAs(t, err, &be)
		require.NoError(t, be.Errs[0])
	}
	require.EqualValues(t, 1, slow.calls.Load())
	require.Len(t, fast.ids(), 4)
}

func TestABusyDestinationFailsItsEventsInsteadOfWaiting(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}), make(chan struct{})
	busy := &sink{Fail: func(ctx context.Context, _ []herald.Envelope) error {
		entered <- struct{}{}
		<-release
		return nil
	}}
	other := &sink{}
	r, _ := newRouter(t, Config{
		Destinations: []Destination{{Name: "busy", Publisher: busy, MaxInFlight: 1, Timeout: time.Minute}, {Name: "other", Publisher: other}},
		Routes:       []Route{{Topic: "b", Destination: "busy"}, {Topic: "o", Destination: "other"}},
	})
	first := make(chan error, 1)
	go func() { first <- r.Publish(context.Background(), []herald.Envelope{ev("1", "b", "k")}) }()
	<-entered // busy's only slot is taken

	err := r.Publish(t.Context(), []herald.Envelope{ev("2", "o", "k"), ev("3", "b", "k2")})
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.NoError(t, be.Errs[0], "the other destination is not held up")
	require.True(t, herald.IsUnavailable(be.Errs[1]))
	require.ErrorContains(t, be.Errs[1], "every publish slot is taken")
	close(release)
	require.NoError(t, <-first)
	require.Equal(t, "closed", r.Status()[0].Breaker, "being busy is not being down")
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, topic string
		want           bool
	}{
		{"orders.*", "orders.placed", true},
		{"orders.*", "orders.eu.placed", false},
		{"orders.*", "orders", false},
		{"orders.>", "orders.eu.placed", true},
		{"orders.>", "orders.placed", true},
		{"orders.>", "orders", false},
		{">", "anything.at.all", true},
		{"*.placed", "orders.placed", true},
		{"ord*", "orders", true},
		// A slash is an ordinary character of a token.
		{"orders.*", "orders/eu", false},
		{"*.placed", "eu/orders.placed", true},
		{"ord*", "ord/ers", true},
		{"orders.>", "orders.eu/placed", true},
	} {
		require.Equal(t, tc.want, matches(tc.pattern, tc.topic), "%s ~ %s", tc.pattern, tc.topic)
	}
}

type atomicBool = atomic.Bool
