package heraldnats_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

const (
	user     = "herald"
	password = "s3cret-pw"
)

type bundle struct {
	url string // with credentials
	nc  *nats.Conn
	js  jetstream.JetStream
}

// setup starts an embedded JetStream server of the test's own, so tests run
// in parallel without sharing streams.
func setup(t testing.TB) *bundle {
	t.Helper()
	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		Username: user, Password: password, NoLog: true, NoSigs: true,
	})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	require.True(t, srv.ReadyForConnections(10*time.Second), "nats-server did not start")

	url := strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+password+"@", 1)
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &bundle{url: url, nc: nc, js: js}
}

func (b *bundle) createStream(t testing.TB, name string, subjects ...string) jetstream.Stream {
	t.Helper()
	s, err := b.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Subjects: subjects})
	require.NoError(t, err)
	return s
}

func (b *bundle) publisher(t testing.TB, cfg *heraldnats.Config) *heraldnats.Publisher {
	t.Helper()
	p, err := heraldnats.New(b.nc, cfg)
	require.NoError(t, err)
	return p
}

func envelope(topic string) herald.Envelope {
	return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: topic, Payload: []byte(`{}`)}, Attempt: 1}
}

// keyed is an event of key, ordered as the relay marks the events of an
// ordered topic.
func keyed(topic, key string, payload []byte) herald.Envelope {
	env := envelope(topic)
	env.Key, env.Payload, env.Ordered = key, payload, true
	return env
}

// storedIDs returns the event ids a stream holds, in stream order.
func storedIDs(t *testing.T, stream jetstream.Stream) []string {
	t.Helper()
	info, err := stream.Info(t.Context())
	require.NoError(t, err)
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := stream.GetMsg(t.Context(), seq)
		require.NoError(t, err)
		ids = append(ids, msg.Header.Get(herald.HeaderID))
	}
	return ids
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

	t.Run("CarriesPayloadSubjectAndHeadersUnchanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := b.createStream(t, "EVENTS", "prod.>")
		p := b.publisher(t, &heraldnats.Config{SubjectPrefix: "prod"})

		env := envelope("orders.placed")
		env.Key = "k-42"
		env.Type = "order.placed"
		env.AggregateType = "order"
		env.AggregateID = "42"
		env.EventVersion, env.AggregateVersion = 3, 42
		env.Payload = []byte{0x00, 0xff, 'h', 'i', '\n', 0x80}
		env.Headers = map[string]string{
			"traceparent":          "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tracestate":           "vendor=opaque",
			"X-Tenant":             "acme",
			"nats-expected-stream": "OTHER", // must never reach JetStream
		}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		msg, err := stream.GetMsg(t.Context(), 1)
		require.NoError(t, err)
		require.Equal(t, "prod.orders.placed", msg.Subject)
		require.Equal(t, env.Payload, msg.Data)
		require.Equal(t, nats.Header{
			"Nats-Msg-Id":              {env.ID},
			"Herald-Id":                {env.ID},
			"Herald-Topic":             {"orders.placed"},
			"Herald-Type":              {"order.placed"},
			"Herald-Key":               {"k-42"},
			"Herald-Aggregate-Type":    {"order"},
			"Herald-Aggregate-Id":      {"42"},
			"Herald-Event-Version":     {"3"},
			"Herald-Aggregate-Version": {"42"},
			"traceparent":              {env.Headers["traceparent"]},
			"tracestate":               {"vendor=opaque"},
			"X-Tenant":                 {"acme"},
		}, msg.Header)
	})

	t.Run("OmitsEmptyOptionalHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := b.createStream(t, "EVENTS", "orders.>")
		p := b.publisher(t, nil)

		env := envelope("orders.placed")
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		msg, err := stream.GetMsg(t.Context(), 1)
		require.NoError(t, err)
		require.Equal(t, nats.Header{
			"Nats-Msg-Id": {env.ID}, "Herald-Id": {env.ID}, "Herald-Topic": {"orders.placed"},
			"Herald-Event-Version": {"1"}, // always: no version is version 1
		}, msg.Header)
	})

	t.Run("RepublishOfSameEventIsDroppedAsDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := b.createStream(t, "EVENTS", "orders.>")
		p := b.publisher(t, nil)

		env := envelope("orders.placed")
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))
		env.Attempt = 2
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		info, err := stream.Info(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 1, info.State.Msgs)

		// The stream keyed the stored message by the event id.
		ack, err := b.js.Publish(t.Context(), "orders.placed", nil, jetstream.WithMsgID(env.ID))
		require.NoError(t, err)
		require.True(t, ack.Duplicate)
	})

	t.Run("LargeBatchArrivesCompleteAndInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := b.createStream(t, "EVENTS", "orders.>")
		p := b.publisher(t, &heraldnats.Config{MaxPending: 100}) // smaller than the batch

		batch := make([]herald.Envelope, 1000)
		for i := range batch {
			batch[i] = envelope("orders.placed")
			batch[i].Payload = fmt.Appendf(nil, "%d", i)
		}
		require.NoError(t, p.Publish(t.Context(), batch))

		cons, err := stream.OrderedConsumer(t.Context(), jetstream.OrderedConsumerConfig{})
		require.NoError(t, err)
		msgs, err := cons.Fetch(len(batch), jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		i := 0
		for msg := range msgs.Messages() {
			require.Equal(t, batch[i].ID, msg.Headers().Get(herald.HeaderID), "message %d", i)
			require.Equal(t, batch[i].Payload, msg.Data())
			i++
		}
		require.NoError(t, msgs.Error())
		require.Equal(t, len(batch), i)
	})

	t.Run("ConcurrentBatchesShareThePendingLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := b.createStream(t, "EVENTS", "orders.>")
		p := b.publisher(t, &heraldnats.Config{MaxPending: 16})

		var wg sync.WaitGroup
		errs := make([]error, 4)
		for g := range errs {
			wg.Go(func() {
				batch := make([]herald.Envelope, 250)
				for i := range batch {
					batch[i] = envelope("orders.placed")
				}
				errs[g] = p.Publish(t.Context(), batch)
			})
		}
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		info, err := stream.Info(t.Context())
		require.NoError(t, err)
		require.EqualValues(t, 1000, info.State.Msgs)
	})

	t.Run("SubjectWithoutStreamFailsRetryablyUntilStreamExists", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var logs testenv.LogBuffer
		p := b.publisher(t, &heraldnats.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		const warning = `level=WARN msg="no JetStream stream captures subject; its events are retried until one does"`
		warnings := func(subject string) int {
			n := 0
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, warning) && strings.Contains(line, " subject="+subject+" ") {
					n++
				}
			}
			return n
		}

		batch := []herald.Envelope{envelope("orders.placed"), envelope("orders.placed")}
		err := p.Publish(t.Context(), batch)
		for _, e := range batchErrors(t, err, len(batch)) {
			require.ErrorIs(t, e, jetstream.ErrNoStreamResponse)
			require.False(t, herald.IsPermanent(e))
		}
		require.Equal(t, 1, warnings("orders.placed"), logs.String())
		require.Contains(t, logs.String(), `fix="create a stream whose subjects include orders.placed: set heraldnats.Config.CreateStream, or run nats stream add NAME --subjects orders.placed"`)

		// Every retry of the subject's events fails the same way: the
		// warning is not repeated, each other subject has its own.
		require.Error(t, p.Publish(t.Context(), batch))
		require.Error(t, p.Publish(t.Context(), []herald.Envelope{envelope("billing.due")}))
		require.Equal(t, 1, warnings("orders.placed"), logs.String())
		require.Equal(t, 1, warnings("billing.due"), logs.String())
		require.Contains(t, logs.String(), `level=DEBUG msg="no JetStream stream captures subject; will retry" component=herald.nats subject=orders.placed`)

		stream := b.createStream(t, "EVENTS", "orders.>")
		require.NoError(t, p.Publish(t.Context(), batch))
		require.Contains(t, logs.String(), `level=INFO msg="a JetStream stream captures subject now" component=herald.nats subject=orders.placed`)

		// A stream that goes away later is warned of again.
		require.NoError(t, b.js.DeleteStream(t.Context(), stream.CachedInfo().Config.Name))
		require.Error(t, p.Publish(t.Context(), batch))
		require.Equal(t, 2, warnings("orders.placed"), logs.String())
	})

	t.Run("MissingStreamWarningNamesTheProgramsFix", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var logs testenv.LogBuffer
		p := b.publisher(t, &heraldnats.Config{
			Logger:       slog.New(slog.NewTextHandler(&logs, nil)),
			NoStreamHint: func(subject string) string { return "pass --streams " + subject },
		})
		require.Error(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders.placed")}))
		require.Contains(t, logs.String(), `fix="pass --streams orders.placed"`)
	})

	t.Run("InvalidSubjectIsPermanentForThatEventOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.createStream(t, "EVENTS", "orders.>")
		p := b.publisher(t, nil)

		bad := []string{"orders.*", "orders.>", "orders..placed", ".orders", "orders.", "orders.a>b"}
		batch := []herald.Envelope{envelope("orders.placed")}
		for _, topic := range bad {
			batch = append(batch, envelope(topic))
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		for i, e := range errs[1:] {
			require.Truef(t, herald.IsPermanent(e), "topic %q: %v", bad[i], e)
		}
	})

	t.Run("MessageOverStreamLimitIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"orders.>"}, MaxMsgSize: 64})
		require.NoError(t, err)
		p := b.publisher(t, nil)

		env := envelope("orders.placed")
		env.Payload = make([]byte, 1024)
		errs := batchErrors(t, p.Publish(t.Context(), []herald.Envelope{env}), 1)
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
	})

	// A stream that refuses messages over 512 bytes: the refusal comes in
	// the PubAck, after the message was sent.
	refusingStream := func(t *testing.T, b *bundle) jetstream.Stream {
		s, err := b.js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"orders.>"}, MaxMsgSize: 512})
		require.NoError(t, err)
		return s
	}
	big := make([]byte, 1024)

	t.Run("StreamRefusalHoldsBackTheRestOfItsKeyUnsent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := refusingStream(t, b)
		p := b.publisher(t, nil)

		batch := []herald.Envelope{
			keyed("orders.placed", "k", []byte("k1")),
			keyed("orders.placed", "k", big), // refused by the stream
			keyed("orders.placed", "k", []byte("k3")),
			keyed("orders.placed", "j", []byte("j1")),
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.ErrorIs(t, errs[2], herald.ErrHeldBack)
		require.ErrorContains(t, errs[2], batch[1].ID, "names the event it waits for")
		require.NoError(t, errs[3])
		require.ElementsMatch(t, []string{batch[0].ID, batch[3].ID}, storedIDs(t, stream),
			"no event stored behind the refused one of its key")
	})

	t.Run("MaxMessageBytesRefusalHoldsBackTheRestOfItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := refusingStream(t, b)
		p := b.publisher(t, &heraldnats.Config{MaxMessageBytes: 512})

		batch := []herald.Envelope{
			keyed("orders.placed", "k", []byte("k1")),
			keyed("orders.placed", "k", big), // refused by MaxMessageBytes
			keyed("orders.placed", "j", []byte("j1")),
			keyed("orders.placed", "k", []byte("k3")),
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.ErrorContains(t, errs[1], "MaxMessageBytes")
		require.NoError(t, errs[2])
		require.ErrorIs(t, errs[3], herald.ErrHeldBack)
		require.Equal(t, []string{batch[0].ID, batch[2].ID}, storedIDs(t, stream))
	})

	t.Run("UnorderedEventIsSentAfterAFailedOneOfItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		stream := refusingStream(t, b)
		p := b.publisher(t, nil)

		// An unordered topic: the relay leaves Ordered false.
		batch := []herald.Envelope{
			keyed("orders.placed", "k", big),
			keyed("orders.placed", "k", []byte("k2")),
		}
		batch[0].Ordered, batch[1].Ordered = false, false
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
		require.NoError(t, errs[1], "an unordered event is never held back")
		require.Equal(t, []string{batch[1].ID}, storedIDs(t, stream))
	})

	t.Run("ReturnsPromptlyWhenContextEnds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		// No stream: the client retries for about half a second before it
		// gives up, far longer than the deadline.
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := p.Publish(ctx, []herald.Envelope{envelope("orders.placed")})
		require.Less(t, time.Since(start), 200*time.Millisecond)
		errs := batchErrors(t, err, 1)
		require.ErrorIs(t, errs[0], context.DeadlineExceeded)
	})

	t.Run("ConnectionClosedWhileAwaitingAcksFailsWholeBatchPromptly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		// No stream: the client retries once 250ms later; a close must end
		// the wait before that.
		time.AfterFunc(50*time.Millisecond, b.nc.Close)
		start := time.Now()
		err := p.Publish(t.Context(), []herald.Envelope{envelope("orders.placed")})
		require.Less(t, time.Since(start), 200*time.Millisecond)
		require.ErrorIs(t, err, nats.ErrConnectionClosed)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "a lost connection is an outage, not a per-event failure")
	})

	t.Run("ConnectionLostMidBatchKeepsWhatTheBrokerConfirmed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)

		// Which PubAcks arrived before a connection drops is a race no
		// test can order through a real server; the answer Publish gives
		// for each case is checked here.
		lost := fmt.Errorf("heraldnats: connection lost awaiting PubAcks: %w", nats.ErrConnectionClosed)
		notSent := fmt.Errorf("herald: not sent: %w", lost)
		errs := batchErrors(t, p.LostMidBatch([]error{nil, lost, notSent, nil}, lost), 4)
		require.NoError(t, errs[0], "a confirmed event is reported confirmed, not sent again")
		require.NoError(t, errs[3])
		for _, err := range errs[1:3] {
			require.True(t, herald.IsUnavailable(err), "the rest wait without spending an attempt: %v", err)
			require.ErrorIs(t, err, nats.ErrConnectionClosed)
		}

		err := p.LostMidBatch([]error{lost, notSent}, lost)
		require.ErrorIs(t, err, nats.ErrConnectionClosed)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "nothing confirmed: an outage of the whole batch")
	})

	t.Run("ClosedConnectionFailsWholeBatchWithoutCredentials", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.createStream(t, "EVENTS", "orders.>")
		p := b.publisher(t, nil)
		b.nc.Close()

		err := p.Publish(t.Context(), []herald.Envelope{envelope("orders.placed")})
		require.ErrorIs(t, err, nats.ErrConnectionClosed)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "a lost connection is an outage, not a per-event failure")
		require.NotContains(t, err.Error(), password)
	})
}

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("CreateStreamCreatesAndUpdatesTheStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cfg := &heraldnats.Config{CreateStream: &jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"orders.>"}}}
		p := b.publisher(t, cfg)
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders.placed")}))

		cfg.CreateStream.Subjects = append(cfg.CreateStream.Subjects, "users.>")
		p = b.publisher(t, cfg)
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("users.created")}))

		stream, err := b.js.Stream(t.Context(), "EVENTS")
		require.NoError(t, err)
		require.EqualValues(t, 2, stream.CachedInfo().State.Msgs)
	})

	t.Run("InvalidConfigErrorNamesTheField", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for field, cfg := range map[string]*heraldnats.Config{
			"MaxPending":      {MaxPending: -1},
			"MaxPendingBytes": {MaxPendingBytes: -1},
			"AckTimeout":      {AckTimeout: -time.Second},
			"SubjectPrefix":   {SubjectPrefix: "prod.*"},
			"CreateStream":    {CreateStream: &jetstream.StreamConfig{Subjects: []string{"x"}}}, // no name
		} {
			_, err := heraldnats.New(b.nc, cfg)
			require.ErrorContains(t, err, "Config."+field)
		}
		_, err := heraldnats.New(nil, nil)
		require.Error(t, err)
	})
}

func BenchmarkPublish(b *testing.B) {
	bb := setup(b)
	bb.createStream(b, "EVENTS", "orders.>")
	p := bb.publisher(b, nil)

	batch := make([]herald.Envelope, 1000)
	for i := range batch {
		batch[i] = envelope("orders.placed")
		batch[i].Payload = bytes.Repeat([]byte("x"), 256)
	}
	events := 0
	for b.Loop() {
		// Fresh ids, or the stream would drop every batch after the first.
		for i := range batch {
			batch[i].ID = herald.NewID()
		}
		if err := p.Publish(b.Context(), batch); err != nil {
			b.Fatal(err)
		}
		events += len(batch)
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
