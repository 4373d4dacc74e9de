package herald_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// fakeStreamStore is a fakeStore that takes streamed events back: it keeps
// the keys it was handed, as a table would hold their rows, and reports
// them waiting.
type fakeStreamStore struct {
	fakeStore
	mu       sync.Mutex
	returned []herald.ReturnParams
	waiting  map[herald.TopicKey]bool
	// ReturnFunc, when set, answers Return before it is recorded; an
	// error records nothing.
	ReturnFunc func(p herald.ReturnParams) error
	// KeysWaitingErr, when set, is KeysWaiting's error.
	KeysWaitingErr func() error
}

func (f *fakeStreamStore) KeysWaiting(_ context.Context, keys []herald.TopicKey) ([]herald.TopicKey, error) {
	if f.KeysWaitingErr != nil {
		if err := f.KeysWaitingErr(); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []herald.TopicKey
	for _, k := range keys {
		if f.waiting[k] {
			out = append(out, k)
		}
	}
	return out, nil
}

func (f *fakeStreamStore) Return(_ context.Context, p herald.ReturnParams) (int, error) {
	if f.ReturnFunc != nil {
		if err := f.ReturnFunc(p); err != nil {
			return 0, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.returned = append(f.returned, p)
	if f.waiting == nil {
		f.waiting = map[herald.TopicKey]bool{}
	}
	for i, env := range p.Events {
		if p.Failed[i].Outcome != herald.OutcomeDead && env.Key != "" {
			f.waiting[herald.TopicKey{Topic: env.Topic, Key: env.Key}] = true
		}
	}
	return len(p.Failed), nil
}

func (f *fakeStreamStore) outcomes() map[string]herald.Outcome {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]herald.Outcome{}
	for _, p := range f.returned {
		for _, fl := range p.Failed {
			out[fl.ID] = fl.Outcome
		}
	}
	return out
}

// fakeSource hands out the batches sent on its channel and records, in
// order, the batches whose Done was called.
type fakeSource struct {
	batches chan herald.SourceBatch
	mu      sync.Mutex
	done    []int // the batches' numbers, as Done was called
	n       int
	doneCh  chan int
}

func newFakeSource() *fakeSource {
	return &fakeSource{batches: make(chan herald.SourceBatch, 16), doneCh: make(chan int, 16)}
}

func (s *fakeSource) send(events ...herald.Envelope) int {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	s.batches <- herald.SourceBatch{Events: events, Done: func() {
		s.mu.Lock()
		s.done = append(s.done, n)
		s.mu.Unlock()
		s.doneCh <- n
	}}
	return n
}

func (s *fakeSource) Next(ctx context.Context, limit int) (herald.SourceBatch, error) {
	select {
	case b := <-s.batches:
		if len(b.Events) > limit {
			return herald.SourceBatch{}, errors.New("batch over the limit")
		}
		return b, nil
	case <-ctx.Done():
		return herald.SourceBatch{}, ctx.Err()
	}
}

func (s *fakeSource) awaitDone(t *testing.T, n int) {
	t.Helper()
	select {
	case got := <-s.doneCh:
		require.Equal(t, n, got, "batches are done in the order they were read")
	case <-time.After(10 * time.Second):
		t.Fatalf("batch %d was never done", n)
	}
}

func streamed(topic, key string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: topic, Key: key, Payload: []byte("{}")},
		Attempt: 1, CreatedAt: time.Now()}
}

func startStreamRelay(t *testing.T, store herald.Store, src herald.Source, pub herald.Publisher) *herald.Relay {
	t.Helper()
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Source: src, Publisher: pub, Logger: slog.New(slog.DiscardHandler),
		IdlePollInterval: time.Hour, PollInterval: time.Millisecond, OutageBackoffCap: 20 * time.Millisecond,
		Retry: herald.RetryPolicy{Base: time.Minute, Cap: time.Hour},
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, relay.Stop(context.Background())) })
	return relay
}

// publishedIDs records what a publisher delivered, and fails the events
// fail names (by id) with an ordinary error; as every publisher must, it
// holds back the later events of a key whose event failed.
type publishedIDs struct {
	mu   sync.Mutex
	ids  []string
	fail map[string]bool
}

func (p *publishedIDs) Publish(_ context.Context, batch []herald.Envelope) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := make([]error, len(batch))
	failed := false
	failedKeys := map[string]bool{}
	for i, env := range batch {
		if env.Ordered && failedKeys[env.Key] {
			errs[i] = herald.ErrHeldBack
			continue
		}
		if p.fail[env.ID] {
			errs[i], failed = errors.New("broker refused it"), true
			failedKeys[env.Key] = true
			continue
		}
		p.ids = append(p.ids, env.ID)
	}
	if failed {
		return &herald.BatchError{Errs: errs}
	}
	return nil
}

func (p *publishedIDs) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ids...)
}

func TestStreamedEventsArePublishedInOrderAndDoneWithNothingWritten(t *testing.T) {
	t.Parallel()
	store, src, pub := &fakeStreamStore{}, newFakeSource(), &publishedIDs{}
	relay := startStreamRelay(t, store, src, pub)
	var want []string
	for b := 1; b <= 3; b++ {
		events := []herald.Envelope{streamed("orders", "k1"), streamed("orders", "k2"), streamed("audit", "")}
		for _, e := range events {
			want = append(want, e.ID)
		}
		src.send(events...)
	}
	for b := 1; b <= 3; b++ {
		src.awaitDone(t, b)
	}
	require.Equal(t, want, pub.got())
	require.Empty(t, store.outcomes(), "a published streamed event writes nothing to the table")
	require.Equal(t, int64(9), relay.Stats().Streamed)
	require.Equal(t, int64(9), relay.Stats().Published)
}

// A failed event goes to the table with a retry, its key's later events
// behind it; a later batch's event of that key follows them there, while
// other keys are published.
func TestAFailedStreamedEventTakesItsKeyToTheTable(t *testing.T) {
	t.Parallel()
	store, src := &fakeStreamStore{}, newFakeSource()
	k1a, k1b, k2 := streamed("orders", "k1"), streamed("orders", "k1"), streamed("orders", "k2")
	pub := &publishedIDs{fail: map[string]bool{k1a.ID: true}}
	startStreamRelay(t, store, src, pub)

	src.send(k1a, k1b, k2)
	src.awaitDone(t, 1)
	k1c, k2b, unkeyed := streamed("orders", "k1"), streamed("orders", "k2"), streamed("orders", "")
	src.send(k1c, k2b, unkeyed)
	src.awaitDone(t, 2)

	require.Equal(t, []string{k2.ID, k2b.ID, unkeyed.ID}, pub.got())
	require.Equal(t, map[string]herald.Outcome{
		k1a.ID: herald.OutcomeRetry, k1b.ID: herald.OutcomeHeldBack, k1c.ID: herald.OutcomeHeldBack,
	}, store.outcomes())
	store.mu.Lock()
	defer store.mu.Unlock()
	require.Len(t, store.returned, 2)
	first := store.returned[0]
	require.Equal(t, []string{k1a.ID, k1b.ID}, []string{first.Events[0].ID, first.Events[1].ID},
		"the events written back are the failed ones, whole, in commit order")
	require.Greater(t, first.Failed[0].Delay, time.Duration(0), "a retry waits its backoff")
	require.Equal(t, "broker refused it", first.Failed[0].Error)
}

// The source may confirm a batch only once its failures are in the table:
// while the table is unreachable the batch is not done, and no later batch
// is read.
func TestAStreamedBatchIsDoneOnlyOnceItsFailuresAreInTheTable(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		calls int
	)
	store := &fakeStreamStore{ReturnFunc: func(herald.ReturnParams) error {
		mu.Lock()
		defer mu.Unlock()
		if calls++; calls < 4 {
			return errors.New("connection refused")
		}
		return nil
	}}
	src := newFakeSource()
	bad := streamed("orders", "k1")
	pub := &publishedIDs{fail: map[string]bool{bad.ID: true}}
	startStreamRelay(t, store, src, pub)
	src.send(bad)
	later := streamed("orders", "k9")
	src.send(later)
	src.awaitDone(t, 1)
	mu.Lock()
	require.Equal(t, 4, calls, "done after the write that went through, not before")
	mu.Unlock()
	src.awaitDone(t, 2)
	require.Equal(t, []string{later.ID}, pub.got())
}

// A relay that stops while the table cannot take a batch's failures leaves
// the batch undone (the source hands it out again on the next start), and
// Stop still returns.
func TestAStoppingRelayLeavesAnUnsettledStreamedBatchUndone(t *testing.T) {
	t.Parallel()
	returning := make(chan struct{}, 1)
	store := &fakeStreamStore{ReturnFunc: func(herald.ReturnParams) error {
		select {
		case returning <- struct{}{}:
		default:
		}
		return errors.New("connection refused")
	}}
	src := newFakeSource()
	bad := streamed("orders", "k1")
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Source: src, Publisher: &publishedIDs{fail: map[string]bool{bad.ID: true}},
		Logger: slog.New(slog.DiscardHandler), IdlePollInterval: time.Hour,
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	src.send(bad)
	<-returning
	require.NoError(t, relay.Stop(context.Background()))
	src.mu.Lock()
	defer src.mu.Unlock()
	require.Empty(t, src.done)
}

func TestUnreadableStreamedRowsAreWrittenDead(t *testing.T) {
	t.Parallel()
	store, src, pub := &fakeStreamStore{}, newFakeSource(), &publishedIDs{}
	startStreamRelay(t, store, src, pub)
	good := streamed("orders", "k1")
	badID := herald.NewID()
	src.batches <- herald.SourceBatch{Events: []herald.Envelope{good},
		Unreadable: []herald.Failure{{ID: badID, Outcome: herald.OutcomeDead, Error: "headers: not an object of strings"}},
		Done:       func() { src.doneCh <- 1 }}
	src.awaitDone(t, 1)
	require.Equal(t, []string{good.ID}, pub.got())
	require.Equal(t, map[string]herald.Outcome{badID: herald.OutcomeDead}, store.outcomes())
}

// A paused topic's streamed events wait in the table, unsent, their
// attempt refunded, for the claims to deliver once it is resumed.
func TestStreamedEventsOfAPausedTopicGoToTheTable(t *testing.T) {
	t.Parallel()
	store, src, pub := &fakeStreamStore{}, newFakeSource(), &publishedIDs{}
	store.PausesFunc = func(context.Context) ([]herald.Pause, error) {
		return []herald.Pause{{Kind: herald.PauseTopic, Name: "held", Paused: true}}, nil
	}
	startStreamRelay(t, store, src, pub)
	a, b, c := streamed("held", "k1"), streamed("held", ""), streamed("orders", "k1")
	src.send(a, b, c)
	src.awaitDone(t, 1)
	require.Equal(t, []string{c.ID}, pub.got())
	require.Equal(t, map[string]herald.Outcome{a.ID: herald.OutcomeHeldBack, b.ID: herald.OutcomeHeldBack}, store.outcomes())
}

func TestASourceNeedsAStoreThatTakesEventsBack(t *testing.T) {
	t.Parallel()
	_, err := herald.NewRelay(&herald.RelayConfig{Store: &fakeStore{}, Source: newFakeSource(),
		Publisher: &publishedIDs{}})
	require.ErrorContains(t, err, "RelayConfig.Source needs a Store that implements herald.StreamStore")
}

// While the database does not answer, a batch whose source can take it
// back is given up unsettled after a while (a database that shuts down
// waits for its log readers): Abandon, not Done, and the relay reads on.
// Once the database answers, the batch handed out again is settled.
func TestAStreamedBatchIsAbandonedWhileTheDatabaseDoesNotAnswer(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		down = true
	)
	store := &fakeStreamStore{KeysWaitingErr: func() error {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return errors.New("the database system is shutting down")
		}
		return nil
	}}
	src, pub := newFakeSource(), &publishedIDs{}
	startStreamRelay(t, store, src, pub)
	ev := streamed("orders", "k1")
	abandoned := make(chan struct{})
	src.batches <- herald.SourceBatch{Events: []herald.Envelope{ev},
		Done:    func() { t.Error("an abandoned batch is never done") },
		Abandon: func() { close(abandoned) }}
	select {
	case <-abandoned:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch was never abandoned")
	}
	require.Empty(t, pub.got(), "nothing of it was published")

	mu.Lock()
	down = false
	mu.Unlock()
	src.send(ev) // the source hands it out again once reconnected
	src.awaitDone(t, 1)
	require.Equal(t, []string{ev.ID}, pub.got())
}

// An event written with a delay (Message.AvailableAt) is not published
// from the stream before it is due: it goes to the table held, its
// AvailableAt with it, and its key's later events of the batch follow it
// there. An event whose AvailableAt is its CreatedAt (the column's
// default, by a database clock that may run ahead of the relay's) or has
// passed is published, as is an unkeyed event after one not due.
func TestAStreamedEventNotDueYetGoesToTheTable(t *testing.T) {
	t.Parallel()
	store, src, pub := &fakeStreamStore{}, newFakeSource(), &publishedIDs{}
	startStreamRelay(t, store, src, pub)
	now := time.Now()
	delayed, behind, other := streamed("orders", "k1"), streamed("orders", "k1"), streamed("orders", "k2")
	delayed.AvailableAt = delayed.CreatedAt.Add(time.Hour)
	atDefault := streamed("orders", "k3")
	atDefault.CreatedAt = now.Add(time.Minute)
	atDefault.AvailableAt = atDefault.CreatedAt
	passed := streamed("orders", "k4")
	passed.CreatedAt, passed.AvailableAt = now.Add(-time.Minute), now.Add(-time.Second)
	unkeyedDelayed, unkeyed := streamed("orders", ""), streamed("orders", "")
	unkeyedDelayed.AvailableAt = unkeyedDelayed.CreatedAt.Add(time.Hour)

	src.send(delayed, other, behind, atDefault, passed, unkeyedDelayed, unkeyed)
	src.awaitDone(t, 1)

	require.Equal(t, []string{other.ID, atDefault.ID, passed.ID, unkeyed.ID}, pub.got())
	require.Equal(t, map[string]herald.Outcome{
		delayed.ID: herald.OutcomeHeldBack, behind.ID: herald.OutcomeHeldBack, unkeyedDelayed.ID: herald.OutcomeHeldBack,
	}, store.outcomes())
	store.mu.Lock()
	defer store.mu.Unlock()
	require.Len(t, store.returned, 1)
	back := store.returned[0].Events
	require.Equal(t, []string{delayed.ID, behind.ID, unkeyedDelayed.ID}, []string{back[0].ID, back[1].ID, back[2].ID})
	require.True(t, back[0].AvailableAt.Equal(delayed.AvailableAt), "the event keeps its AvailableAt for the table")
}

// limitSource records the limits the relay asks its batches for.
type limitSource struct{ limits chan int }

func (s limitSource) Next(ctx context.Context, limit int) (herald.SourceBatch, error) {
	select {
	case s.limits <- limit:
	default:
	}
	<-ctx.Done()
	return herald.SourceBatch{}, ctx.Err()
}

// The relay publishes one batch of its source at a time, so it asks for
// batches as large as the claims keep in flight together.
func TestAStreamedBatchHoldsWhatTheClaimsKeepInFlight(t *testing.T) {
	t.Parallel()
	src := limitSource{limits: make(chan int, 1)}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: &fakeStreamStore{}, Source: src, Publisher: &publishedIDs{}, Logger: slog.New(slog.DiscardHandler),
		BatchSize: 10, MaxInFlight: 3, IdlePollInterval: time.Hour,
	})
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, relay.Stop(context.Background())) })
	select {
	case limit := <-src.limits:
		require.Equal(t, 30, limit)
	case <-time.After(10 * time.Second):
		t.Fatal("the relay never asked its source for a batch")
	}
}

// switchingStore is a fakeStreamStore whose inserts can start streamed
// (herald.StreamSwitch), recording every switch asked of it.
type switchingStore struct {
	fakeStreamStore
	streamed bool
	switches []bool
}

func (s *switchingStore) Table() string { return "public.outbox" }

func (s *switchingStore) StreamInserts(_ context.Context, on bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streamed, s.switches = on, append(s.switches, on)
	return nil
}

func (s *switchingStore) InsertsStreamed(context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamed, nil
}

// Start keeps the two paths apart: a relay with a Source makes inserts
// streamed (its Source holds its place in the log by then); one without
// leaves a polled table as it is and refuses a streamed one, naming it.
func TestStartKeepsPollingAndStreamingApart(t *testing.T) {
	t.Parallel()
	start := func(store herald.Store, src herald.Source) (*herald.Relay, error) {
		relay, err := herald.NewRelay(&herald.RelayConfig{Store: store, Source: src, Publisher: &publishedIDs{},
			Logger: slog.New(slog.DiscardHandler), IdlePollInterval: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, relay.Stop(context.Background())) })
		return relay, relay.Start(context.Background())
	}

	t.Run("ARelayWithASourceMakesInsertsStreamed", func(t *testing.T) {
		t.Parallel()
		store := &switchingStore{}
		_, err := start(store, newFakeSource())
		require.NoError(t, err)
		require.Equal(t, []bool{true}, store.switches)
	})

	t.Run("APollingRelayLeavesAPolledTableAsItIs", func(t *testing.T) {
		t.Parallel()
		store := &switchingStore{}
		_, err := start(store, nil)
		require.NoError(t, err)
		require.Empty(t, store.switches)
	})

	t.Run("APollingRelayRefusesAStreamedTable", func(t *testing.T) {
		t.Parallel()
		store := &switchingStore{streamed: true}
		relay, err := start(store, nil)
		require.ErrorContains(t, err, "table public.outbox is relayed by change-data-capture")
		require.ErrorContains(t, err, "Start it with a Source")
		require.ErrorContains(t, err, "herald source poll")
		require.Empty(t, store.switches, "the refusal changes nothing")
		require.False(t, relay.Health().Running)
	})
}
