package heraldmqtt_test

import (
	"context"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
)

// What a publisher sends, a consumer gets back field for field, whatever
// the topic name it went to.
func TestParseRoundTripsWhatPublishSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := b.publisher(t, &heraldmqtt.Config{TopicPrefix: b.prefix + "events/", TopicMapping: heraldmqtt.TopicDotsToSlashes})
	sent := herald.Message{
		ID: herald.NewID(), Topic: "orders.placed", Key: "order-42", Type: "order.placed",
		AggregateType: "order", AggregateID: "42", EventVersion: 3, AggregateVersion: 42,
		Payload: []byte{0, 1, 2, 'x', 0xff},
		Headers: map[string]string{"X-Tenant": "acme", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
	require.NoError(t, p.Publish(t.Context(), []herald.Envelope{{Message: sent, Attempt: 1}}))

	got, err := heraldmqtt.Parse(b.sub.wait(t, b.prefix+"events/orders/placed", 1)[0])
	require.NoError(t, err)
	require.Equal(t, sent, got)
}

func TestParseRefusesMessagesNotFromHerald(t *testing.T) {
	t.Parallel()
	for _, pub := range []*paho.Publish{
		nil,
		{Topic: "t", Payload: []byte("x")},
		{Topic: "t", Properties: &paho.PublishProperties{}},
		{Topic: "t", Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: herald.HeaderID, Value: "not-a-uuid"}}}},
		{Topic: "t", Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "herald-id", Value: herald.NewID()}}}},
	} {
		_, err := heraldmqtt.Parse(pub)
		require.ErrorIs(t, err, heraldmqtt.ErrNotHerald, "%v", pub)
	}
}

// Properties other programs set are the producer's only when a producer
// could have set them: no Herald-* name that is not Herald's own field, no
// name outside the HTTP token set. The last of a repeated name wins.
func TestParseKeepsOnlyTheProducersHeaders(t *testing.T) {
	t.Parallel()
	id := herald.NewID()
	got, err := heraldmqtt.Parse(&paho.Publish{Topic: "prefix/orders", Properties: &paho.PublishProperties{
		ContentType: "application/json",
		User: paho.UserProperties{
			{Key: herald.HeaderID, Value: id},
			{Key: herald.HeaderTopic, Value: "orders"},
			{Key: "X-Tenant", Value: "first"},
			{Key: "X-Tenant", Value: "acme"},
			{Key: "Herald-Extra", Value: "not a field"},
			{Key: "with space", Value: "not a header name"},
		},
	}})
	require.NoError(t, err)
	require.Equal(t, herald.Message{
		ID: id, Topic: "orders", EventVersion: 1, Payload: []byte{}, Headers: map[string]string{"X-Tenant": "acme"},
	}, got)
}

// A version property that is not a version in range is an error naming
// it, not version 1 or none.
func TestParseRefusesMalformedVersions(t *testing.T) {
	t.Parallel()
	for _, up := range []paho.UserProperty{
		{Key: herald.HeaderEventVersion, Value: "v2"},
		{Key: herald.HeaderEventVersion, Value: "-1"},
		{Key: herald.HeaderEventVersion, Value: "2147483648"},
		{Key: herald.HeaderAggregateVersion, Value: "0"},
		{Key: herald.HeaderAggregateVersion, Value: "+7"},
	} {
		_, err := heraldmqtt.Parse(&paho.Publish{Topic: "orders", Properties: &paho.PublishProperties{
			User: paho.UserProperties{{Key: herald.HeaderID, Value: herald.NewID()}, up},
		}})
		require.ErrorContains(t, err, "heraldmqtt: event ", "%v", up)
		require.ErrorContains(t, err, up.Key)
	}
}

// mosquitto_sub, Mosquitto's own command-line client, receives the event
// as Publish sent it: on the mapped topic, its id and headers as MQTT 5
// user properties, the payload byte for byte.
func TestMosquittoSubReceivesTheEvent(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("mosquitto_sub")
	if err != nil {
		unavailable(t, "mosquitto_sub is not installed (apt-get install mosquitto-clients)")
	}
	b := setup(t)
	// Under no other subscription: mosquitto_sub is the only subscriber.
	prefix := "herald-cli/" + b.prefix
	topic := prefix + "cli/orders"
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// -C 1: exit after one message.
	cmd := exec.CommandContext(ctx, bin, "-h", "127.0.0.1", "-p", "1883", "-V", "mqttv5", "-q", "1", "-t", topic,
		"-C", "1", "-W", "20", "-F", "%t|%q|%P|%x")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())

	// mosquitto_sub's output is buffered until it exits: the broker says
	// when it has subscribed, by no longer answering 0x10 (No matching
	// subscribers), which with RequireSubscribers fails the event unsent.
	p := newPublisher(t, clientConfig(t, b.addr), &heraldmqtt.Config{TopicPrefix: prefix,
		TopicMapping: heraldmqtt.TopicDotsToSlashes, RequireSubscribers: true})
	env := envelope("cli.orders", "order-7", "caf\u00e9 \x00\xff")
	env.Type = "order.placed"
	env.Headers = map[string]string{"X-Tenant": "acme"}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for err := p.Publish(ctx, []herald.Envelope{env}); err != nil; err = p.Publish(ctx, []herald.Envelope{env}) {
		require.Equal(t, byte(heraldmqtt.ReasonNoMatchingSubscribers), reasonCode(t, err), "mosquitto_sub did not subscribe")
		<-tick.C
	}
	require.NoError(t, cmd.Wait(), "mosquitto_sub exits 0 after its one message: %s", out.String())

	fields := strings.SplitN(strings.TrimSpace(out.String()), "|", 4)
	require.Len(t, fields, 4, out.String())
	require.Equal(t, topic, fields[0])
	require.Equal(t, "1", fields[1], "QoS 1")
	props := strings.Fields(fields[2])
	require.Contains(t, props, herald.HeaderID+":"+env.ID, "the event id, for consumers to deduplicate on")
	require.Contains(t, props, herald.HeaderTopic+":cli.orders")
	require.Contains(t, props, herald.HeaderKey+":order-7")
	require.Contains(t, props, herald.HeaderType+":order.placed")
	require.Contains(t, props, "X-Tenant:acme")
	require.Equal(t, hex.EncodeToString(env.Payload), fields[3])
}
