// Package publishertest is the conformance suite for Herald publishers: it
// defines what "correct" means for every herald.Publisher, against a real
// broker.
//
// A publisher adopts it from one of its own test files:
//
//	func TestConformance(t *testing.T) {
//		broker := startBroker(t) // the publisher's own test broker
//		publishertest.Run(t, publishertest.Harness{
//			Features:    publishertest.Features{KeyOrder: true, Headers: true},
//			New:         func(t *testing.T) herald.Publisher { return newPublisher(t, broker) },
//			Topic:       func(t *testing.T) string { return broker.freshTopic(t) },
//			Read:        func(t *testing.T, topic string, n int) []publishertest.Received { ... },
//			Unreachable: func(t *testing.T) herald.Publisher { return newPublisher(t, "127.0.0.1:1") },
//		})
//	}
//
// Features declares what the publisher guarantees. Run checks every
// declared feature and skips, with the reason, the cases that depend on a
// feature that is not declared, so a publisher never passes by omission
// without it showing in the test output. Cases that hold for every
// publisher (payloads byte for byte, event fields, empty batches,
// cancellation, an unreachable broker) always run.
//
// The cases run in parallel: the harness functions must be safe to call
// from several goroutines, and Topic must hand out a fresh topic per call so
// that cases never see each other's messages.
package publishertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldclaim"
)

// Features declares what a publisher guarantees. Run checks each declared
// feature and skips, with t.Skip and a reason, what is not declared.
type Features struct {
	// KeyOrder: events of one key arrive in the order of the batch.
	KeyOrder bool
	// Headers: producer headers arrive with their values.
	Headers bool
	// Dedup: the broker drops a republished event id (NATS Nats-Msg-Id).
	Dedup bool
	// PermanentTooLarge: a payload over the broker's limit is reported with
	// herald.Permanent. It also enables the case that checks that a failed
	// event holds back the later events of its key, since a payload that is
	// too large is the one failure the suite can cause on every broker.
	PermanentTooLarge bool
}

// Received is one message as a consumer read it from the broker.
type Received struct {
	ID, Topic, Key, Type string
	// EventVersion and AggregateVersion are what the publisher's Parse
	// returns (herald.ParseVersions: 1 and 0 when the message has none).
	EventVersion     int
	AggregateVersion int64
	Payload          []byte
	// Headers holds the producer's headers only (no Herald-* or broker
	// headers). Nil and empty are equivalent.
	Headers map[string]string
}

// ReceivedOf is the Received of an event as a publisher's Parse returned
// it.
func ReceivedOf(m herald.Message) Received {
	return Received{
		ID: m.ID, Topic: m.Topic, Key: m.Key, Type: m.Type,
		EventVersion: m.EventVersion, AggregateVersion: m.AggregateVersion,
		Payload: m.Payload, Headers: m.Headers,
	}
}

// Harness connects the suite to one publisher and its broker.
type Harness struct {
	Features Features
	// New returns a publisher connected to the real broker. Called once per
	// case.
	New func(t *testing.T) herald.Publisher
	// Topic returns a fresh topic (unique per call) whose messages Read can
	// see.
	Topic func(t *testing.T) string
	// Read waits, bounded (10s is a good bound), until n messages published
	// to topic have arrived and returns them in arrival order. It fails the
	// test if fewer arrive. It also returns the messages that arrived
	// beyond n by the time it returns (for a stream: everything stored on
	// the topic), so that duplicates and events that should not have been
	// sent are visible.
	Read func(t *testing.T, topic string, n int) []Received
	// Unreachable returns a publisher whose broker is down or unreachable
	// (a closed port on 127.0.0.1, such as 127.0.0.1:1). The suite checks
	// that Publish then returns a non-nil error, never nil.
	Unreachable func(t *testing.T) herald.Publisher
	// TooLarge, when Features.PermanentTooLarge, is a payload size the
	// broker refuses. It must be larger than MaxRegularPayload.
	TooLarge int
	// Busy, when set, is a broker that refuses publishes for load: the
	// suite checks that such refusals spend no attempt and never let a
	// later event of a key be stored before an earlier one. Defaults to
	// nil: the case is skipped.
	Busy *Busy
}

// MaxRegularPayload is the largest payload the suite publishes outside the
// too-large case: a harness must accept payloads of this size.
const MaxRegularPayload = 4096

// promptly bounds how long Publish may take to return once its context has
// ended: generous for a loaded CI machine, far below any broker timeout.
const promptly = 2 * time.Second

// unreachableWait bounds a Publish against an unreachable broker.
const unreachableWait = 20 * time.Second

// Run checks the publisher h describes against its broker. Each case is a
// parallel subtest named as a sentence.
func Run(t *testing.T, h Harness) {
	t.Helper()
	require.NotNil(t, h.New, "publishertest: Harness.New is required")
	require.NotNil(t, h.Topic, "publishertest: Harness.Topic is required")
	require.NotNil(t, h.Read, "publishertest: Harness.Read is required")
	require.NotNil(t, h.Unreachable, "publishertest: Harness.Unreachable is required")
	if h.Features.PermanentTooLarge {
		require.Greater(t, h.TooLarge, MaxRegularPayload,
			"publishertest: Harness.TooLarge must exceed MaxRegularPayload when Features.PermanentTooLarge")
	}
	s := &suite{h: h}
	for _, c := range []struct {
		name    string
		needs   bool
		without string
		run     func(t *testing.T)
	}{
		{"PayloadBytesRoundTripExactly", true, "", s.payloadRoundTrip},
		{"KeyTypeAndEventIDArrive", true, "", s.fieldsArrive},
		{"EventAndAggregateVersionsArrive", true, "", s.versionsArrive},
		{"ProducerHeadersArriveWithTheirValues", h.Features.Headers, "Features.Headers is not declared", s.headersArrive},
		{"ClaimCheckedPayloadResolvesAfterParse", h.Features.Headers, "Features.Headers is not declared", s.claimCheckResolves},
		{"EventsOfOneKeyArriveInBatchOrder", h.Features.KeyOrder, "Features.KeyOrder is not declared", s.oneKeyInOrder},
		{"InterleavedKeysKeepEachKeysOrder", h.Features.KeyOrder, "Features.KeyOrder is not declared", s.interleavedKeysInOrder},
		{"TooLargePayloadIsPermanentAndHoldsBackOnlyItsKey", h.Features.PermanentTooLarge, "Features.PermanentTooLarge is not declared", s.failedEventHoldsBackItsKey},
		{"CancelledContextEndsPublishPromptlyWithAnError", true, "", s.cancelledContext},
		{"DeadlineBoundsPublishAndNilMeansDelivered", true, "", s.deadlineBounded},
		{"UnreachableBrokerNeverYieldsNil", true, "", s.unreachable},
		{"RepublishedEventIDIsDropped", h.Features.Dedup, "Features.Dedup is not declared", s.dedup},
		{"EmptyBatchReturnsNil", true, "", s.emptyBatch},
		{"BusyBrokerRefusalIsUnavailableAndNeverReordersAKey", h.Busy != nil, "Harness.Busy is not set", s.busyRefusal},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if !c.needs {
				t.Skip("publishertest: " + c.without)
			}
			c.run(t)
		})
	}
}

type suite struct{ h Harness }

// batch turns messages into the envelopes a relay would hand over: ids and
// keys filled and every field validated as a Writer does, sequence numbers
// in batch order, first attempt, and ordered when keyed, as an ordered
// relay marks them.
func batch(t *testing.T, msgs ...herald.Message) []herald.Envelope {
	t.Helper()
	maxPayload := herald.DefaultMaxPayloadBytes
	for _, m := range msgs {
		maxPayload = max(maxPayload, len(m.Payload))
	}
	prepared, err := herald.Prepare(msgs, maxPayload)
	require.NoError(t, err, "publishertest: building the batch")
	envs := make([]herald.Envelope, len(prepared))
	now := time.Now()
	for i, m := range prepared {
		envs[i] = herald.Envelope{Message: m, Seq: int64(i + 1), Attempt: 1, CreatedAt: now, Ordered: m.Key != ""}
	}
	return envs
}

// publish publishes envs with a bounded context and requires success.
func publish(t *testing.T, p herald.Publisher, envs []herald.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Publish(ctx, envs))
}

// byID indexes received messages by event id and fails on a duplicate.
func byID(t *testing.T, got []Received) map[string]Received {
	t.Helper()
	m := make(map[string]Received, len(got))
	for _, r := range got {
		_, dup := m[r.ID]
		require.Falsef(t, dup, "event %s arrived twice", r.ID)
		m[r.ID] = r
	}
	return m
}

// ids returns the event ids of got in arrival order.
func ids(got []Received) []string {
	out := make([]string, len(got))
	for i, r := range got {
		out[i] = r.ID
	}
	return out
}

// envIDsOfKey and receivedIDsOfKey return, in order, the ids of key.
func envIDsOfKey(envs []herald.Envelope, key string) []string {
	var out []string
	for _, e := range envs {
		if e.Key == key {
			out = append(out, e.ID)
		}
	}
	return out
}

func receivedIDsOfKey(got []Received, key string) []string {
	var out []string
	for _, r := range got {
		if r.Key == key {
			out = append(out, r.ID)
		}
	}
	return out
}

func (s *suite) payloadRoundTrip(t *testing.T) {
	topic := s.h.Topic(t)
	every := make([]byte, 256)
	for i := range every {
		every[i] = byte(i)
	}
	payloads := [][]byte{
		every, // every byte value, NUL and invalid UTF-8 included
		{},
		nil,
		[]byte(`{"order":42,"note":"caf\u00e9 \u2603"}`),
		[]byte("  leading and trailing space \r\n"),
		bytes.Repeat([]byte{0xff, 0x00, 'x'}, MaxRegularPayload/3),
	}
	msgs := make([]herald.Message, len(payloads))
	for i, p := range payloads {
		msgs[i] = herald.Message{Topic: topic, Key: fmt.Sprintf("payload-%d", i), Payload: p}
	}
	envs := batch(t, msgs...)
	publish(t, s.h.New(t), envs)

	got := s.h.Read(t, topic, len(envs))
	require.Len(t, got, len(envs), "every event arrives once")
	recv := byID(t, got)
	for i, e := range envs {
		r, ok := recv[e.ID]
		require.Truef(t, ok, "event %d (%s) did not arrive", i, e.ID)
		require.Truef(t, bytes.Equal(e.Payload, r.Payload),
			"payload %d changed: sent %d bytes %q, received %d bytes %q", i, len(e.Payload), e.Payload, len(r.Payload), r.Payload)
	}
}

func (s *suite) fieldsArrive(t *testing.T) {
	topic := s.h.Topic(t)
	envs := batch(t,
		herald.Message{Topic: topic, Key: "order-42", Type: "order.placed", AggregateType: "order", AggregateID: "42", Payload: []byte("a")},
		// The key defaults to the aggregate id, as a Writer fills it.
		herald.Message{Topic: topic, Type: "order.paid", AggregateType: "order", AggregateID: "43", Payload: []byte("b")},
		herald.Message{Topic: topic, Key: "k \u00e9 / :", Type: "type.with-unicode.\u2603", Payload: []byte("c")},
	)
	require.Equal(t, "43", envs[1].Key)
	publish(t, s.h.New(t), envs)

	got := s.h.Read(t, topic, len(envs))
	require.Len(t, got, len(envs), "every event arrives once")
	recv := byID(t, got)
	for i, e := range envs {
		r, ok := recv[e.ID]
		require.Truef(t, ok, "event %d (%s) did not arrive", i, e.ID)
		require.Equal(t, e.ID, r.ID)
		require.Equal(t, topic, r.Topic, "event %d", i)
		require.Equal(t, e.Key, r.Key, "event %d", i)
		require.Equal(t, e.Type, r.Type, "event %d", i)
	}
}

// versionsArrive checks that the versions round-trip exactly: an event
// that has both, one at the largest values, and one with neither, which a
// consumer reads as version 1 without an aggregate version. The first uses
// every field besides, so that a publisher with a cap on attributes (SQS
// and SNS take 10) shows it can carry them all.
func (s *suite) versionsArrive(t *testing.T) {
	topic := s.h.Topic(t)
	envs := batch(t,
		herald.Message{Topic: topic, Key: "v-1", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			EventVersion: 3, AggregateVersion: 42, Payload: []byte{0, 0xff, 'v'}, Headers: map[string]string{"X-Tenant": "acme"}},
		herald.Message{Topic: topic, Key: "v-2", EventVersion: herald.MaxEventVersion, AggregateVersion: 1<<63 - 1, Payload: []byte("max")},
		herald.Message{Topic: topic, Key: "v-3", Payload: []byte("none")},
	)
	publish(t, s.h.New(t), envs)

	got := s.h.Read(t, topic, len(envs))
	require.Len(t, got, len(envs), "every event arrives once")
	recv := byID(t, got)
	for i, want := range []struct {
		event     int
		aggregate int64
	}{{3, 42}, {herald.MaxEventVersion, 1<<63 - 1}, {1, 0}} {
		r, ok := recv[envs[i].ID]
		require.Truef(t, ok, "event %d (%s) did not arrive", i, envs[i].ID)
		require.Equal(t, want.event, r.EventVersion, "event %d: event version", i)
		require.Equal(t, want.aggregate, r.AggregateVersion, "event %d: aggregate version", i)
	}
}

func (s *suite) headersArrive(t *testing.T) {
	topic := s.h.Topic(t)
	headers := map[string]string{
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":  "vendor=opaque,other=1",
		"X-Tenant":    "acme",
		"X-Note":      "caf\u00e9 with spaces and \"quotes\"",
		"X-Empty":     "",
	}
	envs := batch(t,
		herald.Message{Topic: topic, Key: "with", Payload: []byte("1"), Headers: headers},
		herald.Message{Topic: topic, Key: "without", Payload: []byte("2")},
	)
	publish(t, s.h.New(t), envs)

	recv := byID(t, s.h.Read(t, topic, len(envs)))
	with, ok := recv[envs[0].ID]
	require.True(t, ok, "the event with headers did not arrive")
	require.Equal(t, headers, with.Headers, "producer headers arrive as sent, and only they")
	without, ok := recv[envs[1].ID]
	require.True(t, ok, "the event without headers did not arrive")
	require.Empty(t, without.Headers, "an event without producer headers carries none")
}

// claimCheckResolves publishes through heraldclaim.Wrap: the reference
// headers of the large event survive the broker and the package's Parse,
// and heraldclaim.Resolve gives back the payload and the producer's
// headers.
func (s *suite) claimCheckResolves(t *testing.T) {
	topic := s.h.Topic(t)
	store := heraldclaim.NewMemoryStore("conformance")
	pub, err := heraldclaim.Wrap(s.h.New(t), store, &heraldclaim.Options{Threshold: 1024})
	require.NoError(t, err)
	large := make([]byte, MaxRegularPayload)
	for i := range large {
		large[i] = byte(i) // every byte value, NUL and 0xff among them
	}
	headers := map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "X-Tenant": "acme"}
	envs := batch(t,
		herald.Message{Topic: topic, Key: "k", Payload: large, Headers: headers},
		herald.Message{Topic: topic, Key: "k", Payload: []byte("small")},
	)
	publish(t, pub, envs)

	recv := byID(t, s.h.Read(t, topic, len(envs)))
	for _, env := range envs {
		r, ok := recv[env.ID]
		require.True(t, ok, "event %s did not arrive", env.ID)
		m, err := heraldclaim.Resolve(t.Context(), store, herald.Message{ID: r.ID, Payload: r.Payload, Headers: r.Headers})
		require.NoError(t, err)
		require.Equal(t, env.Payload, m.Payload)
		if len(env.Headers) == 0 {
			require.Empty(t, m.Headers)
		} else {
			require.Equal(t, env.Headers, m.Headers, "the producer's headers, without the reference")
		}
	}
	require.Equal(t, map[string]int{heraldclaim.DefaultPrefix + envs[0].ID: 1}, store.Keys(), "only the large event is stored")
}

func (s *suite) oneKeyInOrder(t *testing.T) {
	topic := s.h.Topic(t)
	msgs := make([]herald.Message, 200)
	for i := range msgs {
		msgs[i] = herald.Message{Topic: topic, Key: "the-key", Payload: fmt.Appendf(nil, "%d", i)}
	}
	envs := batch(t, msgs...)
	publish(t, s.h.New(t), envs)

	got := s.h.Read(t, topic, len(envs))
	byID(t, got) // no duplicates
	require.Equal(t, envIDsOfKey(envs, "the-key"), ids(got), "events of one key arrive in batch order")
}

func (s *suite) interleavedKeysInOrder(t *testing.T) {
	topic := s.h.Topic(t)
	keys := []string{"alpha", "bravo", "charlie", "delta"}
	var msgs []herald.Message
	for i := range 60 {
		// An irregular interleaving: runs of one key between the others.
		k := keys[(i*7/3)%len(keys)]
		msgs = append(msgs, herald.Message{Topic: topic, Key: k, Payload: fmt.Appendf(nil, "%s-%d", k, i)})
	}
	envs := batch(t, msgs...)
	publish(t, s.h.New(t), envs)

	got := s.h.Read(t, topic, len(envs))
	require.Len(t, got, len(envs), "every event arrives once")
	byID(t, got)
	for _, k := range keys {
		require.Equalf(t, envIDsOfKey(envs, k), receivedIDsOfKey(got, k), "key %s keeps its order", k)
	}
}

func (s *suite) failedEventHoldsBackItsKey(t *testing.T) {
	topic := s.h.Topic(t)
	small := func(key string, i int) herald.Message {
		return herald.Message{Topic: topic, Key: key, Payload: fmt.Appendf(nil, "%s-%d", key, i)}
	}
	tooLarge := herald.Message{Topic: topic, Key: "a", Payload: bytes.Repeat([]byte("x"), s.h.TooLarge)}
	envs := batch(t,
		small("a", 1), small("b", 1), small("c", 1),
		tooLarge, // index 3: fails
		small("b", 2), small("a", 3), small("c", 2), small("a", 4), small("b", 3),
	)
	const failed = 3
	heldBack := []int{5, 7} // later events of key a

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := s.h.New(t).Publish(ctx, envs)
	var be *herald.BatchError
	require.ErrorAsf(t, err, &be, "a batch with one failed event reports per-event results; got %v", err)
	require.Len(t, be.Errs, len(envs), "one result per envelope")
	require.Error(t, be.Errs[failed], "the too-large event failed")
	require.Truef(t, herald.IsPermanent(be.Errs[failed]), "a too-large payload is permanent: %v", be.Errs[failed])
	for _, i := range heldBack {
		require.ErrorIsf(t, be.Errs[i], herald.ErrHeldBack, "event %d (key a, after the failed one)", i)
		require.Falsef(t, herald.IsPermanent(be.Errs[i]), "a held-back event is retried, not dead: %v", be.Errs[i])
	}
	var want []string
	for i, e := range envs {
		if i != failed && e.Key != "a" || i < failed {
			require.NoErrorf(t, be.Errs[i], "event %d (key %s) is not affected by the failure", i, e.Key)
			want = append(want, e.ID)
		}
	}

	// A later batch's event makes late stragglers of this one visible to
	// Read, which returns whatever arrived beyond what it waited for.
	marker := batch(t, small("marker", 0))
	publish(t, s.h.New(t), marker)
	want = append(want, marker[0].ID)

	got := s.h.Read(t, topic, len(want))
	require.ElementsMatch(t, want, ids(got),
		"the other keys' events arrive, and no event of the failed one's key after it")
	for _, k := range []string{"a", "b", "c"} {
		require.Equalf(t, receivedIDsOfKey(got, k), wantIDsOfKey(envs, want, k), "key %s keeps its order", k)
	}
}

// wantIDsOfKey returns, in batch order, the ids of envs that are in want and
// have key.
func wantIDsOfKey(envs []herald.Envelope, want []string, key string) []string {
	in := make(map[string]bool, len(want))
	for _, id := range want {
		in[id] = true
	}
	var out []string
	for _, e := range envs {
		if e.Key == key && in[e.ID] {
			out = append(out, e.ID)
		}
	}
	return out
}

func (s *suite) cancelledContext(t *testing.T) {
	topic := s.h.Topic(t)
	p := s.h.New(t)
	envs := batch(t,
		herald.Message{Topic: topic, Key: "k", Payload: []byte("1")},
		herald.Message{Topic: topic, Key: "k", Payload: []byte("2")},
	)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	err := p.Publish(ctx, envs)
	require.Less(t, time.Since(start), promptly, "Publish returns promptly once its context is cancelled")
	require.Error(t, err, "a cancelled Publish cannot claim its events were confirmed")
	requireNoEventConfirmed(t, err, len(envs))
}

// requireNoEventConfirmed fails unless err reports every envelope of the
// batch as failed: a plain error does, and so does a *herald.BatchError
// without a nil entry.
func requireNoEventConfirmed(t *testing.T, err error, n int) {
	t.Helper()
	var be *herald.BatchError
	if errors.As(err, &be) {
		require.Len(t, be.Errs, n, "one result per envelope")
		for i, e := range be.Errs {
			require.Errorf(t, e, "event %d reported as confirmed", i)
		}
	}
}

func (s *suite) deadlineBounded(t *testing.T) {
	topic := s.h.Topic(t)
	p := s.h.New(t)
	msgs := make([]herald.Message, 500)
	for i := range msgs {
		msgs[i] = herald.Message{Topic: topic, Key: fmt.Sprintf("k%d", i%10), Payload: bytes.Repeat([]byte("p"), 512)}
	}
	envs := batch(t, msgs...)

	const deadline = 5 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), deadline)
	defer cancel()
	start := time.Now()
	err := p.Publish(ctx, envs)
	require.Less(t, time.Since(start), deadline+promptly, "Publish returns soon after its deadline")

	// Whatever the publisher reported as confirmed must have arrived:
	// all of it on nil, the nil entries of a BatchError, nothing otherwise.
	var confirmed []string
	var be *herald.BatchError
	switch {
	case err == nil:
		confirmed = ids(received(envs))
	case errors.As(err, &be):
		require.Len(t, be.Errs, len(envs), "one result per envelope")
		for i, e := range be.Errs {
			if e == nil {
				confirmed = append(confirmed, envs[i].ID)
			}
		}
	}
	if len(confirmed) == 0 {
		return
	}
	// Events sent but not confirmed before the deadline may arrive too,
	// and on a broker that delivers to a subscriber (MQTT) one of them can
	// be read before a confirmed one: read one more message at a time until
	// every confirmed event is there. A confirmed event that never arrives
	// fails in Read, which waits for a message that does not come, or here
	// once every event of the batch was read.
	for want := len(confirmed); ; {
		got := byID(t, s.h.Read(t, topic, want))
		missing := ""
		for _, id := range confirmed {
			if _, ok := got[id]; !ok {
				missing = id
				break
			}
		}
		if missing == "" {
			return
		}
		require.Lessf(t, len(got), len(envs), "event %s was reported confirmed but did not arrive", missing)
		want = len(got) + 1
	}
}

// received views envelopes as the messages they should become.
func received(envs []herald.Envelope) []Received {
	out := make([]Received, len(envs))
	for i, e := range envs {
		out[i] = Received{ID: e.ID, Topic: e.Topic, Key: e.Key, Type: e.Type, Payload: e.Payload, Headers: e.Headers}
	}
	return out
}

func (s *suite) unreachable(t *testing.T) {
	p := s.h.Unreachable(t)
	envs := batch(t,
		herald.Message{Topic: "herald.conformance.unreachable", Key: "k", Payload: []byte("1")},
		herald.Message{Topic: "herald.conformance.unreachable", Key: "k", Payload: []byte("2")},
		herald.Message{Topic: "herald.conformance.unreachable", Key: "j", Payload: []byte("3")},
	)
	for attempt := range 2 {
		ctx, cancel := context.WithTimeout(t.Context(), unreachableWait)
		err := p.Publish(ctx, envs)
		cancel()
		require.Errorf(t, err, "attempt %d: a publisher that cannot reach its broker must not report success", attempt+1)
		requireNoEventConfirmed(t, err, len(envs))
	}
}

func (s *suite) dedup(t *testing.T) {
	topic := s.h.Topic(t)
	p := s.h.New(t)
	envs := batch(t, herald.Message{Topic: topic, Key: "k", Payload: []byte("once")})
	publish(t, p, envs)
	again := append([]herald.Envelope(nil), envs...)
	again[0].Attempt = 2 // the relay republishes after a lost acknowledgement
	publish(t, p, again)
	marker := batch(t, herald.Message{Topic: topic, Key: "marker", Payload: []byte("after")})
	publish(t, p, marker)

	got := s.h.Read(t, topic, 2)
	require.ElementsMatch(t, []string{envs[0].ID, marker[0].ID}, ids(got),
		"the republished event arrives once")
}

func (s *suite) emptyBatch(t *testing.T) {
	p := s.h.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Publish(ctx, nil), "a nil batch")
	require.NoError(t, p.Publish(ctx, []herald.Envelope{}), "an empty batch")
}
