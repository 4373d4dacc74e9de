package heraldkafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

func TestMain(m *testing.M) {
	runKillChildIfAsked()
	testenv.Main(m)
}

type bundle struct {
	cluster *kfake.Cluster
	addrs   []string
	cl      *kgo.Client
}

// setup starts an in-process Kafka cluster of the test's own on a random
// port, with topic auto-creation off (kfake's default), and a client from
// NewClient. "orders" and "prod.orders" have one partition, so that readAll
// sees everything; "users" has three.
func setup(t testing.TB, opts ...kfake.Opt) *bundle {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "prod.orders"), kfake.SeedTopics(3, "users"),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	b := &bundle{cluster: c, addrs: c.ListenAddrs()}
	b.cl = b.client(t)
	return b
}

func (b *bundle) client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := heraldkafka.NewClient(b.addrs, opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func (b *bundle) publisher(t testing.TB, cfg *heraldkafka.Config) *heraldkafka.Publisher {
	t.Helper()
	p, err := heraldkafka.New(b.cl, cfg)
	require.NoError(t, err)
	return p
}

// read consumes topic from the start until n records arrived, within 10s.
func (b *bundle) read(t testing.TB, topic string, n int) []*kgo.Record {
	t.Helper()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "read %d of %d records from %q", len(recs), n, topic)
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetching %s/%d: %v", topic, p, err) })
		recs = append(recs, fs.Records()...)
	}
	return recs
}

// readAll publishes a sentinel event behind whatever the test published to
// topic, a topic of one partition, and reads until it arrives: everything
// else that reached the topic is before it, so the result is complete
// without waiting on a timer.
func (b *bundle) readAll(t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	p := b.publisher(t, nil)
	sentinel := envelope(topic)
	sentinel.Type = "sentinel"
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{sentinel}))

	cons, err := kgo.NewClient(kgo.SeedBrokers(b.addrs...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cons.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "the sentinel did not arrive")
		for _, r := range fs.Records() {
			if header(r, herald.HeaderID) == sentinel.ID {
				return recs
			}
			recs = append(recs, r)
		}
	}
}

func envelope(topic string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: topic, Payload: []byte(`{}`)}, Attempt: 1}
}

// keyed is an event of key, ordered when it has a key, as an ordered relay
// marks it.
func keyed(topic, key, payload string) herald.Envelope {
	env := envelope(topic)
	env.Key, env.Ordered = key, key != ""
	env.Payload = []byte(payload)
	return env
}

func header(r *kgo.Record, name string) string {
	for _, h := range r.Headers {
		if h.Key == name {
			return string(h.Value)
		}
	}
	return ""
}

func ids(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = header(r, herald.HeaderID)
	}
	return out
}

func batchErrors(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, n)
	return be.Errs
}

func TestPublish(t *testing.T) {
	t.Parallel()

	t.Run("CarriesTopicKeyPayloadAndHeadersUnchanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldkafka.Config{TopicPrefix: "prod."})

		env := keyed("orders", "k-42", "")
		env.Type = "order.placed"
		env.AggregateType = "order"
		env.AggregateID = "42"
		env.EventVersion, env.AggregateVersion = 3, 42
		env.Payload = []byte{0x00, 0xff, 'h', 'i', '\n', 0x80}
		env.Headers = map[string]string{
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"X-Tenant":    "acme",
		}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		recs := b.read(t, "prod.orders", 1)
		require.Len(t, recs, 1)
		r := recs[0]
		require.Equal(t, "prod.orders", r.Topic)
		require.Equal(t, []byte("k-42"), r.Key)
		require.Equal(t, env.Payload, r.Value)
		require.Equal(t, []kgo.RecordHeader{
			{Key: "X-Tenant", Value: []byte("acme")},
			{Key: "traceparent", Value: []byte(env.Headers["traceparent"])},
			{Key: "Herald-Id", Value: []byte(env.ID)},
			{Key: "Herald-Topic", Value: []byte("orders")},
			{Key: "Herald-Type", Value: []byte("order.placed")},
			{Key: "Herald-Key", Value: []byte("k-42")},
			{Key: "Herald-Aggregate-Type", Value: []byte("order")},
			{Key: "Herald-Aggregate-Id", Value: []byte("42")},
			{Key: "Herald-Event-Version", Value: []byte("3")},
			{Key: "Herald-Aggregate-Version", Value: []byte("42")},
		}, r.Headers)
	})

	t.Run("EventWithoutKeyOrPayloadGetsNullKeyAndEmptyValue", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		env := envelope("orders")
		env.Payload = nil
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		r := b.read(t, "orders", 1)[0]
		require.Nil(t, r.Key)
		require.NotNil(t, r.Value, "a null value is a tombstone on a compacted topic")
		require.Empty(t, r.Value)
		require.Equal(t, []kgo.RecordHeader{
			{Key: "Herald-Id", Value: []byte(env.ID)},
			{Key: "Herald-Topic", Value: []byte("orders")},
			{Key: "Herald-Event-Version", Value: []byte("1")}, // always: no version is version 1
		}, r.Headers)
	})

	t.Run("HeraldHeadersComeFromTheEventNotFromProducerHeaders", func(t *testing.T) {
		t.Parallel()
		// Writers refuse every Herald-* name...
		_, err := herald.Prepare([]herald.Message{{Topic: "orders", Headers: map[string]string{"Herald-Id": "x"}}}, 0)
		require.ErrorIs(t, err, herald.ErrInvalidMessage)

		// ...and a row inserted with plain SQL that carries them anyway
		// cannot pass off its values as the event's.
		b := setup(t)
		p := b.publisher(t, nil)
		env := keyed("orders", "real-key", "x")
		env.Type = "real.type"
		env.Headers = map[string]string{
			"Herald-Id": herald.NewID(), "herald-type": "forged", "HERALD-KEY": "forged", "X-Tenant": "acme",
		}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		r := b.read(t, "orders", 1)[0]
		require.Equal(t, []kgo.RecordHeader{
			{Key: "X-Tenant", Value: []byte("acme")},
			{Key: "Herald-Id", Value: []byte(env.ID)},
			{Key: "Herald-Topic", Value: []byte("orders")},
			{Key: "Herald-Type", Value: []byte("real.type")},
			{Key: "Herald-Key", Value: []byte("real-key")},
			{Key: "Herald-Event-Version", Value: []byte("1")},
		}, r.Headers)
	})

	t.Run("FiveHundredEventsOfOneKeyArriveInBatchOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		// Other keys interleaved, so the rounds hold more than one key.
		var batch []herald.Envelope
		for i := range 500 {
			batch = append(batch, keyed("orders", "hot", fmt.Sprint(i)))
			if i%10 == 0 {
				batch = append(batch, keyed("orders", fmt.Sprint("cold-", i), "c"))
			}
		}
		require.NoError(t, p.Publish(t.Context(), batch))

		recs := b.read(t, "orders", len(batch))
		require.Len(t, recs, len(batch))
		var hot []string
		for _, r := range recs {
			if string(r.Key) == "hot" {
				hot = append(hot, string(r.Value))
			}
		}
		require.Len(t, hot, 500)
		for i, v := range hot {
			require.Equal(t, fmt.Sprint(i), v, "event %d of the key", i)
		}
	})

	t.Run("RecordOverMaxMessageBytesIsPermanentHoldsBackItsKeyAndOthersDeliver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldkafka.Config{MaxMessageBytes: 1024})

		big := keyed("orders", "b", strings.Repeat("x", 2048))
		batch := []herald.Envelope{
			keyed("orders", "a", "a1"),
			keyed("orders", "b", "b1"),
			big,
			keyed("orders", "b", "b3"),
			keyed("orders", "a", "a2"),
			keyed("orders", "", "no key"),
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		require.True(t, herald.IsPermanent(errs[2]), "%v", errs[2])
		require.ErrorIs(t, errs[2], kerr.MessageTooLarge)
		require.ErrorIs(t, errs[3], herald.ErrHeldBack)
		require.False(t, herald.IsPermanent(errs[3]))
		require.NoError(t, errs[4])
		require.NoError(t, errs[5])

		got := ids(b.readAll(t, "orders"))
		require.ElementsMatch(t, []string{batch[0].ID, batch[1].ID, batch[4].ID, batch[5].ID}, got)
	})

	t.Run("RecordRefusedBeforeSendingHoldsBackItsKeyNamingIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldkafka.Config{MaxMessageBytes: 1024})

		batch := []herald.Envelope{
			keyed("orders", "b", "b1"),
			keyed("orders", "b", strings.Repeat("x", 2048)),
			keyed("orders", "a", "a1"),
			keyed("orders", "b", "b3"),
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.NoError(t, errs[2])
		require.ErrorIs(t, errs[3], herald.ErrHeldBack)
		require.ErrorContains(t, errs[3], batch[1].ID, "names the event it waits for")

		got := ids(b.readAll(t, "orders"))
		require.ElementsMatch(t, []string{batch[0].ID, batch[2].ID}, got)
	})

	t.Run("UnorderedEventIsSentAfterAFailedOneOfItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldkafka.Config{MaxMessageBytes: 1024})

		// An unordered topic: the relay leaves Ordered false, though the
		// events have a key.
		batch := []herald.Envelope{
			keyed("orders", "k", strings.Repeat("x", 2048)),
			keyed("orders", "k", "k2"),
		}
		batch[0].Ordered, batch[1].Ordered = false, false
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
		require.NoError(t, errs[1], "an unordered event is never held back")
		require.Equal(t, []string{batch[1].ID}, ids(b.readAll(t, "orders")))
	})

	t.Run("RecordTheBrokerRefusesAsTooLargeIsPermanentAndHoldsBackItsKey", func(t *testing.T) {
		t.Parallel()
		// The broker's limit is below the client's: only the broker can
		// refuse the record.
		b := setup(t, kfake.BrokerConfigs(map[string]string{"message.max.bytes": "4096"}))
		p := b.publisher(t, nil)

		// Random bytes: the broker counts the batch after compression.
		noise := make([]byte, 8192)
		_, _ = rand.NewChaCha8([32]byte{1}).Read(noise)
		batch := []herald.Envelope{
			keyed("orders", "b", string(noise)),
			keyed("orders", "b", "b2"),
			keyed("orders", "a", "a1"),
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
		require.ErrorIs(t, errs[0], kerr.MessageTooLarge)
		require.ErrorIs(t, errs[1], herald.ErrHeldBack)

		got := ids(b.readAll(t, "orders"))
		require.NotContains(t, got, batch[0].ID)
		require.NotContains(t, got, batch[1].ID, "an event was delivered behind a failed one of its key")
		if errs[2] == nil {
			require.Contains(t, got, batch[2].ID)
		}
	})

	t.Run("RecordsUpToTheClientLimitAreSentAndNoneIsRefusedByTheClient", func(t *testing.T) {
		t.Parallel()
		// Publish must refuse, itself, every record the client would refuse:
		// a refusal after producing could let a later event of the key go.
		b := setup(t)
		const limit = 1024
		b.cl = b.client(t, kgo.ProducerBatchMaxBytes(limit))
		p := b.publisher(t, nil)

		var weSent, clientTakes int
		for size := limit - 250; size <= limit; size++ {
			env := keyed("orders", "k", strings.Repeat("x", size))
			env.Headers = map[string]string{"X-Tenant": "acme"}
			err := p.Publish(t.Context(), []herald.Envelope{env})
			if err == nil {
				weSent++
			} else {
				errs := batchErrors(t, err, 1)
				require.True(t, herald.IsPermanent(errs[0]))
				require.ErrorContains(t, errs[0], "bytes as a record, over the limit of 1024", "size %d", size)
			}
			// The same record, produced directly.
			raw := &kgo.Record{Topic: "users", Key: []byte("k"), Value: env.Payload, Headers: []kgo.RecordHeader{
				{Key: "X-Tenant", Value: []byte("acme")},
				{Key: herald.HeaderID, Value: []byte(env.ID)},
				{Key: herald.HeaderTopic, Value: []byte("orders")},
				{Key: herald.HeaderKey, Value: []byte("k")},
				{Key: herald.HeaderEventVersion, Value: []byte("1")},
			}}
			if err := b.cl.ProduceSync(t.Context(), raw).FirstErr(); err == nil {
				clientTakes++
			} else {
				require.ErrorIs(t, err, kerr.MessageTooLarge)
			}
		}
		require.Positive(t, weSent)
		require.LessOrEqual(t, weSent, clientTakes)
		require.LessOrEqual(t, clientTakes-weSent, 24, "the size estimate is too cautious")
	})

	t.Run("UnknownTopicWithAutoCreationOffIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		batch := []herald.Envelope{keyed("missing", "k", "1"), keyed("missing", "k", "2"), keyed("orders", "k", "3")}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
		require.ErrorIs(t, errs[0], kerr.UnknownTopicOrPartition)
		require.ErrorIs(t, errs[1], herald.ErrHeldBack)
		require.NoError(t, errs[2], "another topic's key is not held back")
	})

	t.Run("TopicKafkaRefusesIsPermanentForThatEventOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		bad := []string{"orders/eu", "orders:eu", "é", "..", strings.Repeat("t", 250)}
		batch := []herald.Envelope{envelope("orders")}
		for _, topic := range bad {
			batch = append(batch, envelope(topic))
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		for i, e := range errs[1:] {
			require.Truef(t, herald.IsPermanent(e), "topic %q: %v", bad[i], e)
			require.ErrorIs(t, e, kerr.InvalidTopicException)
		}
	})

	t.Run("ContextCancelledMidPublishReturnsPromptly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		// The broker swallows produce requests: the records are in flight
		// and the client cannot withdraw them.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b.cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
			b.cluster.KeepControl()
			cancel()
			return nil, nil, true
		})
		batch := []herald.Envelope{keyed("orders", "a", "1"), keyed("orders", "a", "2"), keyed("users", "b", "3")}
		start := time.Now()
		err := p.Publish(ctx, batch)
		require.Less(t, time.Since(start), time.Second)
		require.Error(t, err)
		require.ErrorIs(t, err, context.Canceled)
	})

	t.Run("ClusterGoneFailsTheWholeBatchWithinTheDeadline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders")}))
		b.cluster.Close()

		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := p.Publish(ctx, []herald.Envelope{envelope("orders"), envelope("users")})
		require.Less(t, time.Since(start), 1500*time.Millisecond)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "an outage is not a per-event failure: %v", err)
	})

	t.Run("DeliveryTimeoutBoundsPublishWithoutADeadline", func(t *testing.T) {
		t.Parallel()
		cl, err := heraldkafka.NewClient([]string{"127.0.0.1:1"})
		require.NoError(t, err)
		defer cl.Close()
		p, err := heraldkafka.New(cl, &heraldkafka.Config{DeliveryTimeout: 300 * time.Millisecond})
		require.NoError(t, err)

		start := time.Now()
		err = p.Publish(context.Background(), []herald.Envelope{envelope("orders")})
		require.Less(t, time.Since(start), 2*time.Second)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("ClosedClientFailsTheWholeBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		b.cl.Close()

		err := p.Publish(t.Context(), []herald.Envelope{envelope("orders")})
		require.ErrorIs(t, err, kgo.ErrClientClosed)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be))
	})

	t.Run("EmptyBatchIsNoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.publisher(t, nil).Publish(t.Context(), nil))
	})
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("RefusesAClientThatCannotConfirmDeliveryAsHeraldNeeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for name, opts := range map[string][]kgo.Opt{
			"DisableIdempotentWrite": {kgo.DisableIdempotentWrite()},
			"RequiredAcks":           {kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())},
			"TransactionalID":        {kgo.TransactionalID("tx")},
			"ManualFlushing":         {kgo.ManualFlushing()},
		} {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.addrs...)}, opts...)...)
			require.NoError(t, err)
			_, err = heraldkafka.New(cl, nil)
			require.ErrorContains(t, err, "kgo."+name)
			cl.Close()

			_, err = heraldkafka.NewClient(b.addrs, opts...)
			require.ErrorContains(t, err, "kgo."+name)
		}
		_, err := heraldkafka.New(nil, nil)
		require.Error(t, err)
		_, err = heraldkafka.NewClient(nil)
		require.Error(t, err)
	})

	t.Run("InvalidConfigErrorNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for field, cfg := range map[string]*heraldkafka.Config{
			"MaxMessageBytes": {MaxMessageBytes: -1},
			"DeliveryTimeout": {DeliveryTimeout: -time.Second},
			"TopicPrefix":     {TopicPrefix: "prod/"},
		} {
			_, err := heraldkafka.New(b.cl, cfg)
			require.ErrorContains(t, err, "Config."+field)
		}
		_, err := heraldkafka.New(b.cl, &heraldkafka.Config{TopicPrefix: strings.Repeat("p", 249)})
		require.ErrorContains(t, err, "Config.TopicPrefix")
	})
}
