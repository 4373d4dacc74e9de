package heraldrabbit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

func TestMain(m *testing.M) {
	testenv.Main(m)
}

// brokerURL is the development machine's RabbitMQ.
const brokerURL = "amqp://guest:guest@127.0.0.1:5672/"

var names atomic.Int64

// bundle is a test's own exchange on the machine's RabbitMQ, and an admin
// connection that declares queues bound to it and reads them.
type bundle struct {
	conn     *amqp.Connection
	exchange string
	prefix   string // unique to the test: its queue names start with it
}

// setup connects to the machine's RabbitMQ and declares a direct exchange
// of the test's own, deleted when the test ends; its queues are exclusive
// to the admin connection, so the broker deletes them with it. Without
// RabbitMQ the test skips, except with CI=true, where it fails.
func setup(t *testing.T) *bundle {
	t.Helper()
	conn := adminConn(t)
	b := &bundle{conn: conn, prefix: fmt.Sprintf("herald-test.%d.%d.", time.Now().UnixNano(), names.Add(1))}
	b.exchange = b.prefix + "x"
	b.do(t, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(b.exchange, amqp.ExchangeDirect, false, true, false, false, nil)
	})
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(b.exchange, false, false)
			_ = ch.Close()
		}
	})
	return b
}

// adminConn connects to the machine's RabbitMQ, closed when the test ends.
func adminConn(t *testing.T) *amqp.Connection {
	t.Helper()
	conn, err := amqp.DialConfig(brokerURL, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		unavailable(t, fmt.Sprintf("RabbitMQ is not reachable at 127.0.0.1:5672 (%v); start it with `rabbitmq-server -detached`", err))
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// unavailable skips the test for a missing service, or fails it on CI.
func unavailable(t *testing.T, why string) { t.Helper(); testenv.Unavailable(t, why) }

// do runs f on a channel of its own (tests run in parallel on one admin
// connection).
func (b *bundle) do(t *testing.T, f func(ch *amqp.Channel) error) {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	require.NoError(t, f(ch))
}

// queue declares a queue bound to the exchange with key and returns its
// name.
func (b *bundle) queue(t *testing.T, key string, args amqp.Table) string {
	t.Helper()
	name := fmt.Sprintf("%sq%d", b.prefix, names.Add(1))
	b.do(t, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(name, false, false, true, false, args); err != nil {
			return err
		}
		return ch.QueueBind(name, key, b.exchange, false, nil)
	})
	return name
}

// read waits, up to 10s, until n messages are in queue, takes them, and
// also takes whatever else the queue holds by then.
func (b *bundle) read(t *testing.T, queue string, n int) []amqp.Delivery {
	t.Helper()
	ch, err := b.conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	var got []amqp.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if ok {
			got = append(got, d)
			continue
		}
		if len(got) >= n {
			return got
		}
		require.Falsef(t, time.Now().After(deadline), "read %d of %d messages from %s", len(got), n, queue)
		// The queue is empty: poll again shortly (basic.get does not wait).
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *bundle) config(cfg *heraldrabbit.Config) *heraldrabbit.Config {
	c := heraldrabbit.Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Exchange == "" {
		c.Exchange = b.exchange
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &c
}

// publisher returns a publisher of the machine's RabbitMQ, closed when the
// test ends.
func (b *bundle) publisher(t *testing.T, cfg *heraldrabbit.Config) *heraldrabbit.Publisher {
	t.Helper()
	return b.publisherOf(t, dialer(t, brokerURL, amqp.Config{}), cfg)
}

// publisherOf returns a publisher that connects with dial, closed when the
// test ends.
func (b *bundle) publisherOf(t *testing.T, dial heraldrabbit.DialFunc, cfg *heraldrabbit.Config) *heraldrabbit.Publisher {
	t.Helper()
	p, err := heraldrabbit.New(dial, b.config(cfg))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func dialer(t *testing.T, url string, cfg amqp.Config) heraldrabbit.DialFunc {
	t.Helper()
	dial, err := heraldrabbit.Dialer(url, cfg)
	require.NoError(t, err)
	return dial
}

// envelope is an event as an ordered relay hands it over: ordered when it
// has a key.
func envelope(topic, key string) herald.Envelope {
	return herald.Envelope{
		Message: herald.Message{ID: herald.NewID(), Topic: topic, Key: key, Payload: []byte(`{}`)},
		Attempt: 1, Ordered: key != "",
	}
}

// unordered is an event of a topic the relay does not order.
func unordered(topic, key string) herald.Envelope {
	env := envelope(topic, key)
	env.Ordered = false
	return env
}

// lostRoutingKey routes the events of type "lost" where no queue is bound,
// and the others by topic: so an event can fail as unroutable while the
// relay's order key, its topic and key, is shared with events that arrive.
func lostRoutingKey(env *herald.Envelope) string {
	if env.Type == "lost" {
		return "nowhere"
	}
	return env.Topic
}

// lost is an event that lostRoutingKey sends nowhere.
func lost(env herald.Envelope) herald.Envelope {
	env.Type = "lost"
	return env
}

func batchErrors(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAs(t, err, &be)
	require.Len(t, be.Errs, n)
	return be.Errs
}

func parsedIDs(t *testing.T, ds []amqp.Delivery) []string {
	t.Helper()
	out := make([]string, len(ds))
	for i, d := range ds {
		m, err := heraldrabbit.Parse(d)
		require.NoError(t, err)
		out[i] = m.ID
	}
	return out
}

func envIDs(envs ...herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

func TestPublish(t *testing.T) {
	t.Parallel()

	t.Run("MessageCarriesTheEventAsPropertiesAndHeaders", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "orders", nil)
		p := b.publisher(t, &heraldrabbit.Config{ContentType: "application/json"})
		env := envelope("orders", "order-42")
		env.Type, env.AggregateType, env.AggregateID = "order.placed", "order", "42"
		env.EventVersion, env.AggregateVersion = 3, 42
		env.Headers = map[string]string{"X-Tenant": "acme"}
		env.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		got := b.read(t, q, 1)
		require.Len(t, got, 1)
		d := got[0]
		require.Equal(t, b.exchange, d.Exchange)
		require.Equal(t, "orders", d.RoutingKey, "the topic is the routing key")
		require.Equal(t, uint8(amqp.Persistent), d.DeliveryMode)
		require.Equal(t, env.ID, d.MessageId)
		require.Equal(t, "order.placed", d.Type)
		require.Equal(t, "application/json", d.ContentType)
		require.True(t, env.CreatedAt.Equal(d.Timestamp), "timestamp %v", d.Timestamp)
		require.Equal(t, amqp.Table{
			"X-Tenant":                    "acme",
			herald.HeaderID:               env.ID,
			herald.HeaderTopic:            "orders",
			herald.HeaderKey:              "order-42",
			herald.HeaderType:             "order.placed",
			herald.HeaderAggregateType:    "order",
			herald.HeaderAggregateID:      "42",
			herald.HeaderEventVersion:     "3",
			herald.HeaderAggregateVersion: "42",
		}, d.Headers)
		require.Equal(t, []byte(`{}`), d.Body)
	})

	t.Run("RoutingKeyFunctionChoosesTheRoutingKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "by-type.order.placed", nil)
		p := b.publisher(t, &heraldrabbit.Config{RoutingKey: func(env *herald.Envelope) string { return "by-type." + env.Type }})
		env := envelope("orders", "k")
		env.Type = "order.placed"
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))
		got := b.read(t, q, 1)
		require.Equal(t, []string{env.ID}, parsedIDs(t, got))
		m, err := heraldrabbit.Parse(got[0])
		require.NoError(t, err)
		require.Equal(t, "orders", m.Topic, "the topic travels in a header whatever the routing key")
	})

	t.Run("CCAndBCCAndHeraldHeadersFromARowAreDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "orders", nil)
		other := b.queue(t, "elsewhere", nil)
		var logs testenv.LogBuffer
		p := b.publisher(t, &heraldrabbit.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		// What a row inserted with plain SQL can hold: a writer refuses
		// every one of these names.
		env := envelope("orders", "k")
		env.Headers = map[string]string{
			"CC": "elsewhere", "BCC": "elsewhere", "cc": "elsewhere", "Bcc": "elsewhere",
			"herald-id": herald.NewID(), "Herald-Topic": "spoofed", "X-Kept": "yes",
		}
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

		got := b.read(t, q, 1)
		require.Len(t, got, 1)
		for _, name := range []string{"CC", "BCC", "cc", "Bcc", "herald-id"} {
			require.NotContains(t, got[0].Headers, name)
		}
		require.Equal(t, env.ID, got[0].Headers[herald.HeaderID])
		require.Equal(t, "orders", got[0].Headers[herald.HeaderTopic])
		m, err := heraldrabbit.Parse(got[0])
		require.NoError(t, err)
		require.Equal(t, env.ID, m.ID)
		require.Equal(t, "orders", m.Topic)
		require.Equal(t, map[string]string{"X-Kept": "yes"}, m.Headers)
		require.Contains(t, logs.String(), "dropped a reserved header")

		// Nothing went to the CC and BCC destination: a marker is alone.
		marker := envelope("elsewhere", "m")
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{marker}))
		require.Equal(t, envIDs(marker), parsedIDs(t, b.read(t, other, 1)))
	})

	t.Run("UnroutableEventFailsAndHoldsBackItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "routed", nil)
		p := b.publisher(t, &heraldrabbit.Config{RoutingKey: lostRoutingKey})
		batch := []herald.Envelope{
			lost(envelope("routed", "k")), // no queue bound: returned
			envelope("routed", "k"),       // same key: held back
			envelope("routed", "j"),
			lost(envelope("routed", "")), // no key: fails alone
			envelope("routed", "j"),
		}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.ErrorContains(t, errs[0], "unroutable")
		require.ErrorContains(t, errs[0], `routing key "nowhere"`)
		require.False(t, herald.IsPermanent(errs[0]), "retried by default: %v", errs[0])
		require.False(t, herald.IsUnavailable(errs[0]), "an unroutable event spends its attempts")
		require.ErrorIs(t, errs[1], herald.ErrHeldBack)
		require.NoError(t, errs[2])
		require.ErrorContains(t, errs[3], "unroutable")
		require.NoError(t, errs[4])

		marker := envelope("routed", "m")
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{marker}))
		require.Equal(t, envIDs(batch[2], batch[4], marker), parsedIDs(t, b.read(t, q, 3)),
			"the held-back event was not sent")
	})

	t.Run("AnUnorderedEventAfterAFailedOneOfItsKeyIsSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "routed", nil)
		p := b.publisher(t, &heraldrabbit.Config{RoutingKey: lostRoutingKey})
		// The relay does not order this topic: nothing waits for the
		// returned event.
		batch := []herald.Envelope{lost(unordered("routed", "k")), unordered("routed", "k"), unordered("routed", "k")}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.ErrorContains(t, errs[0], "unroutable")
		require.NoError(t, errs[1])
		require.NoError(t, errs[2])
		require.Equal(t, envIDs(batch[1], batch[2]), parsedIDs(t, b.read(t, q, 2)))
	})

	t.Run("UnroutablePermanentSendsTheEventToTheDeadLetters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldrabbit.Config{UnroutablePermanent: true})
		batch := []herald.Envelope{envelope("nowhere", "k"), envelope("nowhere", "j")}
		for i, err := range batchErrors(t, p.Publish(t.Context(), batch), len(batch)) {
			require.Truef(t, herald.IsPermanent(err), "event %d: %v", i, err)
		}
	})

	t.Run("NackedEventWaitsWithoutSpendingAnAttemptAndHoldsBackItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A queue that holds one message and refuses more with a nack.
		q := b.queue(t, "full", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
		var logs testenv.LogBuffer
		p := b.publisher(t, &heraldrabbit.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		batch := []herald.Envelope{envelope("full", "k"), envelope("full", "k"), envelope("full", "k"), envelope("full", "j")}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.NoError(t, errs[0])
		require.ErrorContains(t, errs[1], "basic.nack")
		require.False(t, herald.IsPermanent(errs[1]))
		require.True(t, herald.IsUnavailable(errs[1]), "a nack is the broker's state, not the event's fault")
		require.ErrorIs(t, errs[2], herald.ErrHeldBack)
		require.ErrorContains(t, errs[3], "basic.nack", "the queue was full for key j too")
		require.True(t, herald.IsUnavailable(errs[3]))
		require.Contains(t, logs.String(), "RabbitMQ refused messages (basic.nack")

		// A batch the broker nacked whole is an outage.
		again := []herald.Envelope{envelope("full", "k"), envelope("full", "j")}
		err := p.Publish(t.Context(), again)
		require.ErrorContains(t, err, "no event of 2 confirmed")
		require.ErrorContains(t, err, "basic.nack")
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "a plain error: %v", err)
		require.Equal(t, 1, strings.Count(logs.String(), "RabbitMQ refused messages"), "one warning while the broker nacks")

		require.Equal(t, envIDs(batch[0]), parsedIDs(t, b.read(t, q, 1)))
		require.NoError(t, p.Publish(t.Context(), again[:1]), "the queue has room again")
		require.Contains(t, logs.String(), "RabbitMQ takes messages again")
		// Full again at once: said at Debug, not warned about again.
		require.Error(t, p.Publish(t.Context(), again[1:]))
		require.Equal(t, 1, strings.Count(logs.String(), "RabbitMQ refused messages"), "one warning per 30 seconds")
	})

	t.Run("OversizedEventsArePermanentAndTheConnectionSurvives", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "orders", nil)
		p := b.publisher(t, &heraldrabbit.Config{MaxMessageBytes: 100})
		big := envelope("orders", "k")
		big.Payload = bytes.Repeat([]byte("x"), 101)
		// Headers the broker's frame size cannot carry (64 x 8 KiB is
		// over the default 128 KiB): RabbitMQ would close the connection.
		fat := envelope("orders", "j")
		fat.Headers = map[string]string{}
		for i := range herald.MaxHeaders {
			fat.Headers[fmt.Sprintf("X-H%d", i)] = strings.Repeat("v", herald.MaxHeaderValueLen)
		}
		longName := envelope("orders", "l")
		longName.Headers = map[string]string{strings.Repeat("n", 256): "v"}
		ok := envelope("orders", "m")
		batch := []herald.Envelope{big, envelope("orders", "k"), fat, longName, ok}
		errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
		require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
		require.ErrorContains(t, errs[0], "Config.MaxMessageBytes")
		require.ErrorIs(t, errs[1], herald.ErrHeldBack)
		require.True(t, herald.IsPermanent(errs[2]), "%v", errs[2])
		require.ErrorContains(t, errs[2], "frame size")
		require.True(t, herald.IsPermanent(errs[3]), "%v", errs[3])
		require.NoError(t, errs[4])

		after := envelope("orders", "m")
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{after}))
		require.Equal(t, envIDs(ok, after), parsedIDs(t, b.read(t, q, 2)))
	})

	t.Run("ConcurrentPublishesAreEachConfirmed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		q := b.queue(t, "orders", nil)
		p := b.publisher(t, nil)
		const publishers, batches, size = 8, 10, 20
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			want []string
		)
		for g := range publishers {
			wg.Go(func() {
				for range batches {
					batch := make([]herald.Envelope, size)
					for i := range batch {
						batch[i] = envelope("orders", fmt.Sprintf("g%d-k%d", g, i%3))
					}
					if err := p.Publish(t.Context(), batch); err != nil {
						t.Errorf("publisher %d: %v", g, err)
						return
					}
					mu.Lock()
					want = append(want, envIDs(batch...)...)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		require.ElementsMatch(t, want, parsedIDs(t, b.read(t, q, publishers*batches*size)))
	})

	t.Run("MissingExchangeIsAnOutageNotASuccess", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldrabbit.Config{Exchange: b.prefix + "missing"})
		for range 2 { // the channel closes; the next Publish opens another
			err := p.Publish(t.Context(), []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")})
			require.Error(t, err)
			var be *herald.BatchError
			require.False(t, errors.As(err, &be), "nothing was answered: the batch fails as a whole: %v", err)
			require.ErrorContains(t, err, "NOT_FOUND")
		}
	})

	t.Run("PublishAfterCloseFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.queue(t, "orders", nil)
		p := b.publisher(t, nil)
		require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders", "k")}))
		require.NoError(t, p.Close())
		require.NoError(t, p.Close(), "closing twice does nothing")
		require.ErrorIs(t, p.Publish(t.Context(), []herald.Envelope{envelope("orders", "k")}), heraldrabbit.ErrClosed)
	})
}

func TestNew(t *testing.T) {
	t.Parallel()
	dial := func(context.Context) (*amqp.Connection, error) { return nil, errors.New("unused") }
	for field, cfg := range map[string]*heraldrabbit.Config{
		"Config.Exchange":          {Exchange: strings.Repeat("x", 256)},
		"Config.ContentType":       {ContentType: strings.Repeat("x", 256)},
		"Config.MaxMessageBytes":   {MaxMessageBytes: -1},
		"Config.ReconnectMinDelay": {ReconnectMinDelay: -1},
		"Config.ReconnectMaxDelay": {ReconnectMinDelay: time.Second, ReconnectMaxDelay: time.Millisecond},
	} {
		_, err := heraldrabbit.New(dial, cfg)
		require.ErrorContains(t, err, field)
	}
	_, err := heraldrabbit.New(nil, nil)
	require.ErrorContains(t, err, "DialFunc is required")
	p, err := heraldrabbit.New(dial, nil)
	require.NoError(t, err, "nil is the defaults")
	require.NoError(t, p.Close())
}

func TestDialer(t *testing.T) {
	t.Parallel()

	t.Run("AMalformedURIIsRefusedWithoutItsPassword", func(t *testing.T) {
		t.Parallel()
		for _, url := range []string{"http://guest:hunter2@127.0.0.1/", "amqp://guest:hunter2@127.0.0.1:notaport/"} {
			_, err := heraldrabbit.Dialer(url, amqp.Config{})
			require.ErrorContains(t, err, "not an AMQP URI")
			require.NotContains(t, err.Error(), "hunter2")
		}
	})

	t.Run("RecoveryIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := heraldrabbit.Dialer(brokerURL, amqp.Config{Recovery: &amqp.Recovery{}})
		require.ErrorContains(t, err, "amqp.Config.Recovery")
	})

	t.Run("ItConnectsWithTheClientsConfigAndLeavesItAsItWas", func(t *testing.T) {
		t.Parallel()
		adminConn(t) // skips without RabbitMQ
		props := amqp.Table{"product": "herald test"}
		dial := dialer(t, brokerURL, amqp.Config{Properties: props, FrameSize: 64 << 10})
		conn, err := dial(t.Context())
		require.NoError(t, err)
		defer conn.Close()
		require.Equal(t, 64<<10, conn.Config.FrameSize, "the client's settings apply")
		require.Equal(t, amqp.Table{"product": "herald test"}, props, "the caller's table is not written to")
	})

	t.Run("AnEndedContextDialsNothing", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := dialer(t, brokerURL, amqp.Config{})(ctx)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// The password of the URL appears in no error and no log line: not when the
// broker is unreachable, not when it refuses the credentials, not when the
// URL does not parse.
func TestPasswordNeverAppears(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	const password = "s3cret-Pa55"
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	check := func(t *testing.T, url string) {
		t.Helper()
		dial, err := heraldrabbit.Dialer(url, amqp.Config{})
		if err != nil {
			require.NotContains(t, err.Error(), password)
			return
		}
		p, err := heraldrabbit.New(dial, &heraldrabbit.Config{Logger: logger, ReconnectMinDelay: time.Millisecond})
		require.NoError(t, err)
		defer p.Close()
		for range 2 {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			err := p.Publish(ctx, []herald.Envelope{envelope("orders", "k")})
			cancel()
			require.Error(t, err)
			require.NotContains(t, err.Error(), password)
			require.NotContains(t, fmt.Sprintf("%+v", err), password)
			err = p.Connect(t.Context())
			require.Error(t, err)
			require.NotContains(t, err.Error(), password)
		}
	}
	t.Run("UnreachableBroker", func(t *testing.T) {
		check(t, "amqp://guest:"+password+"@127.0.0.1:1/")
	})
	t.Run("RefusedCredentials", func(t *testing.T) {
		adminConn(t) // skips without RabbitMQ
		check(t, "amqp://guest:"+password+"@127.0.0.1:5672/")
	})
	t.Run("MalformedURL", func(t *testing.T) {
		check(t, "amqp://guest:"+password+"@127.0.0.1:notaport/")
		check(t, "amqp://guest:"+password+"@127.0.0.1:5672/%zz")
	})
	require.NotContains(t, logs.String(), password)
	require.Contains(t, logs.String(), "connecting to RabbitMQ failed", "the failures were logged")
}
