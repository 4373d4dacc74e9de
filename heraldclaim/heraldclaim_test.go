package heraldclaim_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
)

// recorder is the wrapped publisher: it keeps the batches it got.
type recorder struct{ got [][]herald.Envelope }

func (r *recorder) Publish(_ context.Context, batch []herald.Envelope) error {
	r.got = append(r.got, append([]herald.Envelope(nil), batch...))
	return nil
}

func event(payload []byte, headers map[string]string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "orders", Key: "42",
		Payload: payload, Headers: headers}}
}

func wrap(t *testing.T, next herald.Publisher, store heraldclaim.ObjectStore, opts *heraldclaim.Options) herald.Publisher {
	t.Helper()
	p, err := heraldclaim.Wrap(next, store, opts)
	require.NoError(t, err)
	return p
}

func TestSmallEventsPassAsTheyAre(t *testing.T) {
	store := heraldclaim.NewMemoryStore("b")
	rec := &recorder{}
	small := event([]byte("hello"), map[string]string{"A": "1"})
	require.NoError(t, wrap(t, rec, store, nil).Publish(t.Context(), []herald.Envelope{small}))
	require.Equal(t, []herald.Envelope{small}, rec.got[0])
	require.Empty(t, store.Keys())
}

func TestLargePayloadIsStoredUnderTheEventIDAndResolvedBack(t *testing.T) {
	store := heraldclaim.NewMemoryStore("bucket-1")
	rec := &recorder{}
	payload := bytes.Repeat([]byte("x"), 2000)
	big := event(payload, map[string]string{"Content-Type": "application/json", "Traceparent": "00-abc"})
	small := event([]byte("s"), nil)
	p := wrap(t, rec, store, &heraldclaim.Options{Threshold: 1000, Prefix: "events/"})
	batch := []herald.Envelope{big, small}
	require.NoError(t, p.Publish(t.Context(), batch))
	require.Equal(t, payload, batch[0].Payload, "the relay's batch is not changed")

	sent := rec.got[0]
	require.Len(t, sent, 2)
	require.Empty(t, sent[0].Payload)
	require.NotNil(t, sent[0].Payload)
	sum := sha256.Sum256(payload)
	require.Equal(t, map[string]string{
		"Content-Type":                "application/json",
		"Traceparent":                 "00-abc",
		heraldclaim.HeaderBucket:      "bucket-1",
		heraldclaim.HeaderKey:         "events/" + big.ID,
		heraldclaim.HeaderSize:        strconv.Itoa(len(payload)),
		heraldclaim.HeaderSHA256:      hex.EncodeToString(sum[:]),
		heraldclaim.HeaderContentType: "application/json",
	}, sent[0].Headers)
	require.Equal(t, small, sent[1])

	// A retry writes the same object again: one key.
	require.NoError(t, p.Publish(t.Context(), batch))
	require.Equal(t, map[string]int{"events/" + big.ID: 2}, store.Keys())

	got, err := heraldclaim.Resolve(t.Context(), store, sent[0].Message)
	require.NoError(t, err)
	require.Equal(t, big.Message, got)

	plain, err := heraldclaim.Resolve(t.Context(), store, small.Message)
	require.NoError(t, err)
	require.Equal(t, small.Message, plain)
}

func TestOptionsSizeMeasuresTheMessage(t *testing.T) {
	store := heraldclaim.NewMemoryStore("b")
	rec := &recorder{}
	// A broker that counts every payload byte four times.
	p := wrap(t, rec, store, &heraldclaim.Options{Threshold: 100, Size: func(env *herald.Envelope) int { return 4 * len(env.Payload) }})
	under, over := event(bytes.Repeat([]byte("u"), 25), nil), event(bytes.Repeat([]byte("o"), 26), nil)
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{under, over}))
	require.Equal(t, under, rec.got[0][0])
	require.Empty(t, rec.got[0][1].Payload)
	require.Equal(t, map[string]int{heraldclaim.DefaultPrefix + over.ID: 1}, store.Keys())
}

// gatedStore counts the writes under way and waits for the test to let
// them finish.
type gatedStore struct {
	*heraldclaim.MemoryStore
	running, most atomic.Int64
	release       chan struct{}
}

func (s *gatedStore) Put(ctx context.Context, key string, body []byte, contentType string) error {
	n := s.running.Add(1)
	defer s.running.Add(-1)
	for {
		m := s.most.Load()
		if n <= m || s.most.CompareAndSwap(m, n) {
			break
		}
	}
	<-s.release
	if bytes.HasPrefix(body, []byte("fail")) {
		return errors.New("refused")
	}
	return s.MemoryStore.Put(ctx, key, body, contentType)
}

func TestUploadsOfABatchRunTwoAtATimeAndAllFinish(t *testing.T) {
	store := &gatedStore{MemoryStore: heraldclaim.NewMemoryStore("b"), release: make(chan struct{})}
	rec := &recorder{}
	p := wrap(t, rec, store, &heraldclaim.Options{Threshold: 10, Uploads: 2})
	var batch []herald.Envelope
	for i := range 5 {
		payload := bytes.Repeat([]byte{byte('a' + i)}, 100)
		if i == 1 {
			payload = append([]byte("fail"), payload...)
		}
		batch = append(batch, event(payload, nil))
	}
	done := make(chan error, 1)
	go func() { done <- p.Publish(t.Context(), batch) }()
	// The first two start and wait; each release lets one finish and the
	// next start.
	require.Eventually(t, func() bool { return store.running.Load() == 2 }, 10*time.Second, time.Millisecond)
	for range batch {
		store.release <- struct{}{}
	}
	err := <-done
	require.ErrorContains(t, err, "refused")
	require.ErrorContains(t, err, batch[1].ID)
	require.Equal(t, int64(2), store.most.Load(), "two at a time")
	require.Zero(t, store.running.Load(), "every upload finished before Publish returned")
	require.Len(t, store.Keys(), 4)
	require.Empty(t, rec.got, "nothing is published when one upload failed")
}

func TestAProducersClaimHeadersAreDropped(t *testing.T) {
	rec := &recorder{}
	spoof := event([]byte("s"), map[string]string{"claim-check-key": "someone-elses", "X": "y"})
	require.NoError(t, wrap(t, rec, heraldclaim.NewMemoryStore("b"), nil).Publish(t.Context(), []herald.Envelope{spoof}))
	require.Equal(t, map[string]string{"X": "y"}, rec.got[0][0].Headers)
}

// downStore refuses every write.
type downStore struct{ *heraldclaim.MemoryStore }

func (downStore) Put(context.Context, string, []byte, string) error {
	return errors.New("connection refused")
}

func TestAStoreThatFailsFailsTheBatchAsAnOutage(t *testing.T) {
	rec := &recorder{}
	p := wrap(t, rec, downStore{heraldclaim.NewMemoryStore("b")}, &heraldclaim.Options{Threshold: 10})
	err := p.Publish(t.Context(), []herald.Envelope{event([]byte("s"), nil), event(bytes.Repeat([]byte("x"), 100), nil)})
	require.ErrorContains(t, err, "connection refused")
	var be *herald.BatchError
	require.False(t, errors.As(err, &be), "a whole-batch error, which the relay takes as an outage")
	require.False(t, herald.IsPermanent(err))
	require.Empty(t, rec.got, "nothing is published without its object")
}

func TestResolveChecksTheObject(t *testing.T) {
	store := heraldclaim.NewMemoryStore("b")
	rec := &recorder{}
	payload := bytes.Repeat([]byte("p"), 64)
	big := event(payload, nil)
	require.NoError(t, wrap(t, rec, store, &heraldclaim.Options{Threshold: 10}).Publish(t.Context(), []herald.Envelope{big}))
	m := rec.got[0][0].Message
	key := m.Headers[heraldclaim.HeaderKey]

	tamper := func(body []byte) error {
		require.NoError(t, store.Put(t.Context(), key, body, "x"))
		_, err := heraldclaim.Resolve(t.Context(), store, m)
		return err
	}
	flipped := bytes.Clone(payload)
	flipped[3] = 'q'
	var mm *heraldclaim.MismatchError
	err := tamper(flipped)
	require.ErrorIs(t, err, heraldclaim.ErrMismatch)
	require.ErrorAs(t, err, &mm)
	require.Contains(t, err.Error(), "SHA-256")
	require.ErrorIs(t, tamper(append(bytes.Clone(payload), 'z')), heraldclaim.ErrMismatch)
	require.ErrorIs(t, tamper(payload[:10]), heraldclaim.ErrMismatch)
	require.NoError(t, tamper(payload))

	_, err = heraldclaim.Resolve(t.Context(), heraldclaim.NewMemoryStore("other"), m)
	require.ErrorContains(t, err, `refers to bucket "b"`)

	_, err = heraldclaim.Resolve(t.Context(), heraldclaim.NewMemoryStore("b"), m)
	require.ErrorIs(t, err, heraldclaim.ErrNotFound)

	for name, v := range map[string]string{heraldclaim.HeaderSize: "-1", heraldclaim.HeaderSHA256: "zz"} {
		bad := m
		bad.Headers = map[string]string{}
		for k, x := range m.Headers {
			bad.Headers[k] = x
		}
		bad.Headers[name] = v
		_, err := heraldclaim.Resolve(t.Context(), store, bad)
		require.ErrorContains(t, err, name)
	}
	partial := m
	partial.Headers = map[string]string{heraldclaim.HeaderKey: key}
	_, err = heraldclaim.Resolve(t.Context(), store, partial)
	require.ErrorContains(t, err, heraldclaim.HeaderBucket)
}

func TestWrapChecksItsArguments(t *testing.T) {
	store := heraldclaim.NewMemoryStore("b")
	_, err := heraldclaim.Wrap(nil, store, nil)
	require.Error(t, err)
	_, err = heraldclaim.Wrap(&recorder{}, nil, nil)
	require.Error(t, err)
	_, err = heraldclaim.Wrap(&recorder{}, heraldclaim.NewMemoryStore(""), nil)
	require.Error(t, err)
	_, err = heraldclaim.Wrap(&recorder{}, store, &heraldclaim.Options{Threshold: -1})
	require.ErrorContains(t, err, "Threshold")
	_, err = heraldclaim.Wrap(&recorder{}, store, &heraldclaim.Options{Uploads: -1})
	require.ErrorContains(t, err, "Uploads")
	_, err = heraldclaim.Wrap(&recorder{}, store, &heraldclaim.Options{Prefix: "/x"})
	require.ErrorContains(t, err, "Prefix")
}
