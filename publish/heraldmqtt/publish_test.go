package heraldmqtt_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// One event becomes one PUBLISH at QoS 1, not retained, on the mapped
// topic name, its fields and the producer's headers as user properties.
func TestEventTravelsAsOnePUBLISHWithUserProperties(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t, &heraldmqtt.Config{TopicMapping: heraldmqtt.TopicDotsToSlashes})
	env := herald.Envelope{Message: herald.Message{
		ID: herald.NewID(), Topic: "orders.placed", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
		Payload: []byte{0, 1, 0xff}, Headers: map[string]string{"X-Tenant": "acme"},
	}, Attempt: 1, Ordered: true}
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

	got := b.sub.wait(t, b.prefix+"orders/placed", 1)
	require.Len(t, got, 1)
	msg := got[0]
	require.EqualValues(t, 1, msg.QoS)
	require.False(t, msg.Retain)
	require.Equal(t, []byte{0, 1, 0xff}, msg.Payload)
	props := map[string]string{}
	for _, up := range msg.Properties.User {
		props[up.Key] = up.Value
	}
	require.Equal(t, map[string]string{
		herald.HeaderID: env.ID, herald.HeaderTopic: "orders.placed", herald.HeaderKey: "order-42",
		herald.HeaderType: "order.placed", herald.HeaderAggregateType: "order", herald.HeaderAggregateID: "42",
		herald.HeaderEventVersion: "3", herald.HeaderAggregateVersion: "42",
		"X-Tenant": "acme",
	}, props)
}

// A refused string or topic fails its event alone, before sending: the
// connection stays up (Mosquitto would have closed it) and the rest of the
// batch is published.
func TestEventsNoBrokerTakesFailAloneBeforeSending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t, &heraldmqtt.Config{TopicMapping: heraldmqtt.TopicDotsToSlashes})
	batch := []herald.Envelope{
		envelope("ok", "a", "1"),
		envelope("ok", "b", "tab"),
		envelope("ok", "c", "wild"),
		envelope("bad..level", "d", "empty level"),
		envelope("ok", "b", "after tab"),
		envelope("ok", "e", "2"),
	}
	batch[1].Headers = map[string]string{"X-Note": "a\tb"}
	batch[2].Topic = "ok.+"
	errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))
	for _, i := range []int{1, 2, 3} {
		require.True(t, herald.IsPermanent(errs[i]), "event %d: %v", i, errs[i])
	}
	require.ErrorIs(t, errs[4], herald.ErrHeldBack, "key b's later event waits behind its failed one")
	require.NoError(t, errs[0])
	require.NoError(t, errs[5])

	// Keys a and e went in one round, in either order.
	got := b.sub.wait(t, b.prefix+"ok", 2)
	require.ElementsMatch(t, []string{"1", "2"}, payloads(got))
	// The same publisher goes on: its connection was never dropped.
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("ok", "a", "3")}))
	got = b.sub.wait(t, b.prefix+"ok", 3)
	require.Len(t, got, 3)
	require.Equal(t, "3", string(got[2].Payload))
}

func payloads(msgs []*paho.Publish) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Payload)
	}
	return out
}

// A PUBACK of 0x10 (No matching subscribers) is a success by default, and
// a failure of the event, retried, with RequireSubscribers.
func TestNoMatchingSubscribers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nobody := "herald-nobody/" + b.prefix // under no subscription
	client := clientConfig(t, b.addr)
	lax := newPublisher(t, client, &heraldmqtt.Config{TopicPrefix: nobody})
	require.NoError(t, lax.Publish(t.Context(), []herald.Envelope{envelope("orders", "k", "dropped")}))

	strict := newPublisher(t, clientConfig(t, b.addr), &heraldmqtt.Config{TopicPrefix: nobody, RequireSubscribers: true})
	errs := batchErrors(t, strict.Publish(t.Context(), []herald.Envelope{envelope("orders", "k", "refused"), envelope("orders", "k", "held")}), 2)
	require.Equal(t, byte(heraldmqtt.ReasonNoMatchingSubscribers), reasonCode(t, errs[0]))
	require.False(t, herald.IsPermanent(errs[0]) || herald.IsUnavailable(errs[0]), "retried per the retry policy: %v", errs[0])
	require.ErrorIs(t, errs[1], herald.ErrHeldBack)

	// With a subscriber, the same publisher's event is a success.
	sub := subscribe(t, b.addr, nobody+"#")
	require.NoError(t, strict.Publish(t.Context(), []herald.Envelope{envelope("orders", "k", "wanted")}))
	require.Equal(t, []string{"wanted"}, payloads(sub.wait(t, nobody+"orders", 1)))
}

// A private Mosquitto with an ACL, a message size limit and a maximum
// packet size: each refusal reaches the relay as its reason code asks,
// and holds back only its key.
func TestBrokerRefusals(t *testing.T) {
	t.Parallel()
	const (
		maxPacket   = 20000 // announced in the CONNACK
		maxMessage  = 10000 // answered with PUBACK 0x95
		allowedRoot = "allowed/"
	)
	broker := startMosquitto(t, "max_packet_size 20000\nmessage_size_limit 10000\nacl_file {dir}/acl",
		map[string]string{"acl": "topic readwrite allowed/#\n"})
	sub := subscribe(t, broker.addr, allowedRoot+"#")
	p := newPublisher(t, clientConfig(t, broker.addr), &heraldmqtt.Config{})

	batch := []herald.Envelope{
		envelope("denied/orders", "a", "not authorized"),
		envelope("denied/orders", "a", "held back"),
		envelope("allowed/orders", "b", strings.Repeat("m", maxMessage+1)),
		envelope("allowed/orders", "b", "held back"),
		envelope("allowed/orders", "c", strings.Repeat("p", maxPacket)),
		envelope("allowed/orders", "c", "held back"),
		envelope("allowed/orders", "d", "published"),
	}
	errs := batchErrors(t, p.Publish(t.Context(), batch), len(batch))

	require.True(t, herald.IsPermanent(errs[0]), "%v", errs[0])
	require.Equal(t, byte(heraldmqtt.ReasonNotAuthorized), reasonCode(t, errs[0]))
	require.True(t, herald.IsPermanent(errs[2]), "%v", errs[2])
	require.Equal(t, byte(heraldmqtt.ReasonPacketTooLarge), reasonCode(t, errs[2]))
	require.True(t, herald.IsPermanent(errs[4]), "%v", errs[4])
	require.ErrorContains(t, errs[4], "the broker's Maximum Packet Size", "refused before sending, from the CONNACK")
	for _, i := range []int{1, 3, 5} {
		require.ErrorIs(t, errs[i], herald.ErrHeldBack, "event %d", i)
	}
	require.NoError(t, errs[6])
	require.Equal(t, []string{"published"}, payloads(sub.wait(t, "allowed/orders", 1)))

	// The packet over the broker's maximum was never sent: the connection
	// is still the same, and takes the next event at once.
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("allowed/orders", "c", "next")}))
	require.Equal(t, []string{"published", "next"}, payloads(sub.wait(t, "allowed/orders", 2)))
}

// A connection lost while PUBACKs are awaited fails the batch as an
// outage, promptly, with no event reported as published; the publisher
// reconnects for the next batch.
func TestConnectionLostIsAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewProxy(t, b.addr)
	p := newPublisher(t, clientConfig(t, proxy.Addr()), &heraldmqtt.Config{TopicPrefix: b.prefix})
	require.NoError(t, p.Connect(t.Context()))

	// The PUBLISHes reach the broker, which delivers them; their PUBACKs
	// stay in the proxy.
	proxy.Pause(testenv.Downstream)
	batch := []herald.Envelope{envelope("lost", "a", "1"), envelope("lost", "b", "2"), envelope("lost", "a", "3")}
	done := make(chan error, 1)
	go func() { done <- p.Publish(t.Context(), batch) }()
	b.sub.wait(t, b.prefix+"lost", 2)
	select {
	case err := <-done:
		require.Failf(t, "Publish returned before any PUBACK came", "%v", err)
	default:
	}

	cut := time.Now()
	proxy.Reset()
	proxy.Resume()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Publish did not return within 5s of the connection's loss")
	}
	require.Less(t, time.Since(cut), 5*time.Second)
	require.Error(t, err)
	var be *herald.BatchError
	require.False(t, errors.As(err, &be), "no event was acknowledged: the batch fails as a whole (an outage): %v", err)
	require.False(t, herald.IsPermanent(err))

	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{envelope("lost", "a", "again")}))
	got := payloads(b.sub.wait(t, b.prefix+"lost", 3))
	require.Equal(t, "again", got[len(got)-1])
	require.GreaterOrEqual(t, proxy.Accepted(), 2, "the publisher connected again")
}

// An unreachable broker fails Connect and Publish with the connection's
// error, which names no password.
func TestUnreachableBrokerFailsWithoutThePassword(t *testing.T) {
	t.Parallel()
	const password = "s3cret-pa55"
	u, err := url.Parse("mqtt://herald:" + password + "@127.0.0.1:1")
	require.NoError(t, err)
	client := autopaho.ClientConfig{ServerUrls: []*url.URL{u}, ConnectUsername: "herald", ConnectPassword: []byte(password)}
	var logs testenv.LogBuffer
	p := newPublisher(t, client, &heraldmqtt.Config{ReconnectMinDelay: 10 * time.Millisecond, ReconnectMaxDelay: 20 * time.Millisecond,
		Logger: slogTo(&logs)})

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err = p.Connect(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, context.DeadlineExceeded, "the attempt's failure, not the deadline")
	for range 2 {
		err := p.Publish(ctx, []herald.Envelope{envelope("t", "k", "1")})
		require.Error(t, err)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "an outage: %v", err)
		require.NotContains(t, err.Error(), password)
	}
	require.NotContains(t, logs.String(), password)
	require.Contains(t, logs.String(), "connecting to the MQTT broker failed")
}

// Close ends a Publish waiting for PUBACKs, and Publish then fails with
// ErrClosed; closing twice is fine.
func TestCloseEndsAPublishInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy := testenv.NewProxy(t, b.addr)
	p, err := heraldmqtt.New(clientConfig(t, proxy.Addr()), &heraldmqtt.Config{TopicPrefix: b.prefix, Logger: slogTo(&testenv.LogBuffer{})})
	require.NoError(t, err)
	require.NoError(t, p.Connect(t.Context()))
	proxy.Pause(testenv.Downstream)
	done := make(chan error, 1)
	go func() { done <- p.Publish(t.Context(), []herald.Envelope{envelope("closing", "a", "1")}) }()
	b.sub.wait(t, b.prefix+"closing", 1)

	closed := make(chan struct{})
	go func() {
		defer close(closed)
		// The DISCONNECT waits in the paused proxy too: Close must not
		// depend on the broker's answer.
		require.NoError(t, p.Close())
	}()
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close did not end the Publish in progress")
	}
	require.Error(t, err)
	<-closed
	require.ErrorIs(t, p.Publish(t.Context(), []herald.Envelope{envelope("closing", "a", "2")}), heraldmqtt.ErrClosed)
	require.ErrorIs(t, p.Connect(t.Context()), heraldmqtt.ErrClosed)
	require.NoError(t, p.Close())
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestNewRefusesWhatItCannotHonour(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("mqtt://127.0.0.1:1883")
	require.NoError(t, err)
	ok := autopaho.ClientConfig{ServerUrls: []*url.URL{u}}
	for name, c := range map[string]struct {
		client autopaho.ClientConfig
		cfg    heraldmqtt.Config
		field  string
	}{
		"NoServer":       {autopaho.ClientConfig{}, heraldmqtt.Config{}, "ServerUrls"},
		"SessionExpiry":  {func() autopaho.ClientConfig { c := ok; c.SessionExpiryInterval = 60; return c }(), heraldmqtt.Config{}, "SessionExpiryInterval"},
		"UnknownMapping": {ok, heraldmqtt.Config{TopicMapping: 7}, "TopicMapping"},
		"NegativePacket": {ok, heraldmqtt.Config{MaxPacketBytes: -1}, "MaxPacketBytes"},
		"HugePacket":     {ok, heraldmqtt.Config{MaxPacketBytes: heraldmqtt.MaxPacketBytes + 1}, "MaxPacketBytes"},
		"Backoff":        {ok, heraldmqtt.Config{ReconnectMinDelay: time.Second, ReconnectMaxDelay: time.Millisecond}, "ReconnectMaxDelay"},
	} {
		_, err := heraldmqtt.New(c.client, &c.cfg)
		require.ErrorContains(t, err, c.field, name)
	}
}
