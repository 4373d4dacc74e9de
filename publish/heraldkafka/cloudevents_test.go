package heraldkafka_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/publish/heraldkafka"
	"github.com/herald-outbox/herald/publish/publishertest"
)

// kafkaMessage reads a record the way the Kafka protocol binding says (and
// the SDK's kafka_sarama module does): a structured content-type means the
// JSON format, otherwise ce_ headers are the attributes and content-type
// the datacontenttype. The SDK's spec tables type and check the
// attributes; the kafka_sarama module itself is left out as it would pull
// in the Sarama client.
type kafkaMessage struct{ r *kgo.Record }

var ceKafka = spec.WithPrefix("ce_").Version("1.0")

func (m kafkaMessage) contentType() string {
	for _, h := range m.r.Headers {
		if strings.EqualFold(h.Key, "content-type") {
			return string(h.Value)
		}
	}
	return ""
}

func (m kafkaMessage) ReadEncoding() binding.Encoding {
	if format.IsFormat(m.contentType()) {
		return binding.EncodingStructured
	}
	return binding.EncodingBinary
}

func (m kafkaMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.ReadEncoding() != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.JSON, bytes.NewReader(m.r.Value))
}

func (m kafkaMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	for _, h := range m.r.Headers {
		var err error
		switch name := strings.ToLower(h.Key); {
		case name == "content-type":
			err = w.SetAttribute(ceKafka.AttributeFromKind(spec.DataContentType), string(h.Value))
		case ceKafka.Attribute(name) != nil:
			err = w.SetAttribute(ceKafka.Attribute(name), string(h.Value))
		case strings.HasPrefix(name, "ce_"):
			err = w.SetExtension(strings.TrimPrefix(name, "ce_"), string(h.Value))
		}
		if err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(m.r.Value))
}

func (m kafkaMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := ceKafka.AttributeFromKind(k)
	if k == spec.DataContentType {
		return attr, m.contentType()
	}
	return attr, m.headerValue(attr.PrefixedName())
}

func (m kafkaMessage) GetExtension(name string) any { return m.headerValue("ce_" + name) }

func (m kafkaMessage) headerValue(name string) any {
	for _, h := range m.r.Headers {
		if strings.EqualFold(h.Key, name) {
			return string(h.Value)
		}
	}
	return nil
}

func (m kafkaMessage) Finish(error) error { return nil }

func TestCloudEvents(t *testing.T) {
	t.Parallel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode)+"RecordIsReadByTheSDKAndParse", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			p := b.publisher(t, &heraldkafka.Config{
				TopicPrefix: "prod.", CloudEvents: &heraldce.Config{Source: "urn:shop:orders", Mode: mode},
			})
			env := envelope("orders")
			env.Key, env.Type, env.AggregateType, env.AggregateID = "order-7", "order.placed", "order", "7"
			env.EventVersion, env.AggregateVersion = 2, 7
			env.Payload = []byte(`{"order":7}`)
			env.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			env.Headers = map[string]string{"Content-Type": "application/json", "traceparent": traceparent, "X-Tenant": "acme"}
			require.NoError(t, p.Publish(t.Context(), []herald.Envelope{env}))

			r := b.read(t, "prod.orders", 1)[0]
			require.Equal(t, "order-7", string(r.Key), "the record key stays the event's key")
			require.Empty(t, header(r, herald.HeaderID))
			require.Equal(t, "acme", header(r, "X-Tenant"))

			e, err := binding.ToEvent(t.Context(), kafkaMessage{r})
			require.NoError(t, err)
			require.NoError(t, e.Validate())
			checkEvent(t, e, &env)
			if mode == heraldce.Binary {
				require.Equal(t, env.Payload, r.Value)
				require.Equal(t, env.ID, header(r, "ce_id"))
				require.Equal(t, "application/json", header(r, "content-type"))
			} else {
				require.Equal(t, heraldce.StructuredContentType, header(r, "content-type"))
			}
			require.JSONEq(t, `{"order":7}`, string(e.Data()))

			// The prefix is not needed: the topic travels in heraldtopic.
			back, err := heraldkafka.Parse(r)
			require.NoError(t, err)
			want := env.Message
			require.Equal(t, want, back)
		})
	}

	t.Run("NewRefusesABadSource", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := heraldkafka.New(b.cl, &heraldkafka.Config{CloudEvents: &heraldce.Config{Source: "a b"}})
		require.ErrorContains(t, err, "heraldkafka: Config.CloudEvents.Source")
	})

	t.Run("ParseRefusesACloudEventHeraldDidNotSend", func(t *testing.T) {
		t.Parallel()
		r := &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{
			{Key: "ce_id", Value: []byte("42")}, {Key: "ce_specversion", Value: []byte("1.0")},
		}}
		_, err := heraldkafka.Parse(r)
		require.ErrorIs(t, err, heraldkafka.ErrNotHerald)
	})
}

func checkEvent(t *testing.T, e *event.Event, env *herald.Envelope) {
	t.Helper()
	require.Equal(t, env.ID, e.ID())
	require.Equal(t, env.Type, e.Type())
	require.Equal(t, "urn:shop:orders", e.Source())
	require.Equal(t, env.AggregateID, e.Subject())
	require.True(t, env.CreatedAt.Equal(e.Time()))
	require.Equal(t, "application/json", e.DataContentType())
	require.Equal(t, map[string]any{
		"traceparent": env.Headers["traceparent"], "heraldtopic": env.Topic,
		"heraldkey": env.Key, "heraldaggregatetype": env.AggregateType,
		"heraldeventversion": strconv.Itoa(env.EventVersion),
		"heraldaggversion":   strconv.FormatInt(env.AggregateVersion, 10),
	}, e.Extensions())
}

// The shared publisher suite with CloudEvents on, in each mode: Parse
// gives back what the suite sent.
func TestConformanceCloudEvents(t *testing.T) {
	for _, mode := range []heraldce.Mode{heraldce.Binary, heraldce.Structured} {
		t.Run(string(mode), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(1))
			require.NoError(t, err)
			t.Cleanup(c.Close)
			addrs := c.ListenAddrs()
			var topics atomic.Int64
			newPublisher := func(t *testing.T, addrs []string, timeout time.Duration) herald.Publisher {
				cl, err := heraldkafka.NewClient(addrs, kgo.AllowAutoTopicCreation())
				require.NoError(t, err)
				t.Cleanup(cl.Close)
				p, err := heraldkafka.New(cl, &heraldkafka.Config{
					MaxMessageBytes: 63 << 10, DeliveryTimeout: timeout,
					CloudEvents: &heraldce.Config{Source: "/conformance", Mode: mode},
				})
				require.NoError(t, err)
				return p
			}
			publishertest.Run(t, publishertest.Harness{
				Features: publishertest.Features{KeyOrder: true, Headers: true, PermanentTooLarge: true},
				New:      func(t *testing.T) herald.Publisher { return newPublisher(t, addrs, 0) },
				Topic:    func(*testing.T) string { return fmt.Sprintf("conformance.%d", topics.Add(1)) },
				Read: func(t *testing.T, topic string, n int) []publishertest.Received {
					return readStored(t, addrs, topic, n)
				},
				Unreachable: func(t *testing.T) herald.Publisher {
					return newPublisher(t, []string{"127.0.0.1:1"}, time.Second)
				},
				TooLarge: 64 << 10,
			})
		})
	}
}
