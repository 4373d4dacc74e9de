// Package cetest reads a message the way a CloudEvents protocol binding
// says, into the official sdk-go's event, for the tests of the publishers
// whose binding sdk-go has no module for here (AMQP, MQTT, Pub/Sub) or
// that have no binding at all (Redis Streams). sdk-go's spec tables type
// and check every attribute, and its JSON format reads structured mode, so
// what the tests check is what an SDK reader would accept; the binding's
// own rules (the prefix, where the content type travels) are the few
// lines of Message. Tests only.
package cetest

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
)

// Message is a received message as a binding sees it: its headers
// (properties, attributes, fields), the protocol's content-type field and
// its body. In binary mode, the headers whose names start with Prefix
// (compared without regard to case) are the attributes, and ContentType is
// datacontenttype; Prefix "" takes every header for an attribute (MQTT).
// A ContentType of the JSON event format means structured mode.
type Message struct {
	Prefix      string
	Headers     []Header
	ContentType string
	Body        []byte
}

// Header is one header of a received message.
type Header struct{ Name, Value string }

// ToEvent reads m into an event, as sdk-go's binding.ToEvent does, and
// validates it.
func ToEvent(ctx context.Context, m Message) (*event.Event, error) {
	e, err := binding.ToEvent(ctx, reader{m, spec.WithPrefix(strings.ToLower(m.Prefix)).Version("1.0")})
	if err != nil {
		return nil, err
	}
	return e, e.Validate()
}

type reader struct {
	m       Message
	version spec.Version
}

var _ binding.MessageMetadataReader = reader{}

func (r reader) ReadEncoding() binding.Encoding {
	if format.IsFormat(r.m.ContentType) {
		return binding.EncodingStructured
	}
	return binding.EncodingBinary
}

func (r reader) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if r.ReadEncoding() != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.Lookup(r.m.ContentType), bytes.NewReader(r.m.Body))
}

func (r reader) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if r.ReadEncoding() != binding.EncodingBinary {
		return binding.ErrNotBinary
	}
	if r.m.ContentType != "" {
		if err := w.SetAttribute(r.version.AttributeFromKind(spec.DataContentType), r.m.ContentType); err != nil {
			return err
		}
	}
	for _, h := range r.m.Headers {
		if !strings.HasPrefix(strings.ToLower(h.Name), strings.ToLower(r.m.Prefix)) {
			continue
		}
		var err error
		if attr := r.version.Attribute(h.Name); attr != nil {
			err = w.SetAttribute(attr, h.Value)
		} else {
			err = w.SetExtension(strings.ToLower(h.Name[len(r.m.Prefix):]), h.Value)
		}
		if err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(r.m.Body))
}

func (r reader) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := r.version.AttributeFromKind(k)
	if k == spec.DataContentType {
		return attr, r.m.ContentType
	}
	return attr, r.header(attr.PrefixedName())
}

func (r reader) GetExtension(name string) any { return r.header(r.m.Prefix + name) }

func (r reader) header(name string) any {
	for _, h := range r.m.Headers {
		if strings.EqualFold(h.Name, name) {
			return h.Value
		}
	}
	return nil
}

func (r reader) Finish(error) error { return nil }

// Traceparent is the W3C trace context of Envelope's events.
const Traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// Envelope returns an ordered event on topic with a new id and every field
// a CloudEvent carries: key, type, aggregate, versions (event 2, aggregate
// 7), time, a JSON payload, its Content-Type, a trace context and one other
// producer header, X-Tenant.
func Envelope(topic string) herald.Envelope {
	return herald.Envelope{
		Message: herald.Message{
			ID: herald.NewID(), Topic: topic, Key: "order-7", Type: "order.placed",
			AggregateType: "order", AggregateID: "7", EventVersion: 2, AggregateVersion: 7,
			Payload: []byte(`{"order":7}`),
			Headers: map[string]string{"Content-Type": "application/json", "traceparent": Traceparent, "X-Tenant": "acme"},
		},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Attempt:   1, Ordered: true,
	}
}

// Check asserts that e is env, an event of Envelope's, as package heraldce
// maps it with source.
func Check(t testing.TB, e *event.Event, env *herald.Envelope, source string) {
	t.Helper()
	require.Equal(t, "1.0", e.SpecVersion())
	require.Equal(t, env.ID, e.ID())
	require.Equal(t, env.Type, e.Type())
	require.Equal(t, source, e.Source())
	require.Equal(t, env.AggregateID, e.Subject())
	require.True(t, env.CreatedAt.Equal(e.Time()), "time %s", e.Time())
	require.Equal(t, "application/json", e.DataContentType())
	require.JSONEq(t, string(env.Payload), string(e.Data()))
	require.Equal(t, map[string]any{
		"traceparent": env.Headers["traceparent"], "heraldtopic": env.Topic,
		"heraldkey": env.Key, "heraldaggregatetype": env.AggregateType,
		"heraldeventversion": strconv.Itoa(env.EventVersion),
		"heraldaggversion":   strconv.FormatInt(env.AggregateVersion, 10),
	}, e.Extensions())
}
