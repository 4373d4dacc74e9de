// Package heraldce maps Herald events to CloudEvents 1.0 and back, for the
// publishers that offer CloudEvents as an option (every publisher of
// Herald's: heraldwebhook, heraldkafka, heraldnats, heraldrabbit,
// heraldredis, heraldmqtt, heraldaws, heraldpubsub). It imports no broker
// SDK: each publisher calls it with its own header type.
//
// An event becomes a CloudEvent with these attributes:
//
//   - specversion: "1.0";
//   - id: the event id;
//   - source: Config.Source;
//   - type: the event's Type, or its topic when Type is empty (type is
//     required and may not be empty), so Parse then returns the topic as
//     Type;
//   - subject: the aggregate id, when set;
//   - time: the event's CreatedAt (RFC 3339, UTC), when set;
//   - datacontenttype: the producer's Content-Type header, when set;
//   - traceparent and tracestate: the producer's headers of those names
//     (the distributed tracing extension);
//   - heraldtopic, heraldkey, heraldaggregatetype: the event's topic, key
//     and aggregate type, when set;
//   - heraldeventversion: the event's EventVersion, always (1 when the
//     event has none), and heraldaggversion: its AggregateVersion, when
//     set; both as decimal strings, read back as the Herald-Event-Version
//     and Herald-Aggregate-Version headers are (herald.ParseVersions).
//
// The producer's other headers stay protocol headers beside the event; in
// binary mode the names of the binding's prefix (ce-, ce_) are dropped, as
// they would read as attributes. (Header names cannot hold the ':' of the
// AMQP binding's prefix.)
package heraldce

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
)

// Mode is a CloudEvents content mode.
type Mode string

// The content modes.
const (
	// Binary puts the attributes into protocol headers and the payload,
	// unchanged, into the message body.
	Binary Mode = "binary"
	// Structured puts the whole event, attributes and payload, into the
	// body in the JSON event format.
	Structured Mode = "structured"
)

// StructuredContentType is the content type of a structured-mode message.
const StructuredContentType = "application/cloudevents+json; charset=UTF-8"

// Names of the extension attributes that carry Herald's own fields.
const (
	ExtTopic         = "heraldtopic"
	ExtKey           = "heraldkey"
	ExtAggregateType = "heraldaggregatetype"
	// ExtEventVersion carries Message.EventVersion, ExtAggregateVersion
	// Message.AggregateVersion (extension names are at most 20 lower-case
	// letters and digits).
	ExtEventVersion     = "heraldeventversion"
	ExtAggregateVersion = "heraldaggversion"
)

// Config turns CloudEvents on for a publisher.
type Config struct {
	// Source is the source attribute of every event: a URI-reference such
	// as "/orders" or "https://shop.example/orders". Required.
	Source string
	// Mode is the content mode: Binary or Structured. Defaults to the
	// publisher's default (structured for NATS, SQS and SNS, which have no
	// binary mode; binary for the others).
	Mode Mode
}

// ErrNotHerald is returned by the Parse functions for a CloudEvent whose id
// is not a UUID: no Herald relay published it.
var ErrNotHerald = errors.New("heraldce: not a Herald event (the CloudEvents id is not a UUID)")

// Validate reports what is wrong with c, naming the field under prefix
// (such as "heraldkafka: Config.CloudEvents").
func (c *Config) Validate(prefix string) error {
	if c.Source == "" {
		return fmt.Errorf("%s.Source is required (a URI-reference such as /orders)", prefix)
	}
	if err := checkSource(c.Source); err != nil {
		return fmt.Errorf("%s.Source %q is not a URI-reference: %v", prefix, c.Source, err)
	}
	switch c.Mode {
	case "", Binary, Structured:
		return nil
	}
	return fmt.Errorf("%s.Mode %q is neither %q nor %q", prefix, c.Mode, Binary, Structured)
}

// checkSource accepts an RFC 3986 URI-reference: no space, control
// character or other byte a URI never holds unescaped, and what net/url
// parses.
func checkSource(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"<>\^`+"`{|}", c) >= 0 {
			return fmt.Errorf("byte %q at %d is not allowed in a URI", c, i)
		}
	}
	if _, err := url.Parse(s); err != nil {
		return errors.New("it does not parse")
	}
	return nil
}

// ModeOr returns c.Mode, or def when it is empty.
func (c *Config) ModeOr(def Mode) Mode {
	if c.Mode == "" {
		return def
	}
	return c.Mode
}

// Attribute is one CloudEvents context attribute or extension.
type Attribute struct {
	Name, Value string
}

// Attributes returns the attributes of env, in the order of the package
// comment, leaving out empty optional ones.
func (c *Config) Attributes(env *herald.Envelope) []Attribute {
	typ := env.Type
	if typ == "" {
		typ = env.Topic
	}
	attrs := []Attribute{
		{"specversion", "1.0"},
		{"id", env.ID},
		{"source", c.Source},
		{"type", typ},
	}
	add := func(name, v string) {
		if v != "" {
			attrs = append(attrs, Attribute{name, v})
		}
	}
	add("subject", env.AggregateID)
	if !env.CreatedAt.IsZero() {
		add("time", env.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	add("datacontenttype", header(env.Headers, "Content-Type"))
	add("traceparent", header(env.Headers, "traceparent"))
	add("tracestate", header(env.Headers, "tracestate"))
	add(ExtTopic, env.Topic)
	add(ExtKey, env.Key)
	add(ExtAggregateType, env.AggregateType)
	// As herald.EventHeaders spells them: an envelope built without a
	// version is version 1, as a Writer would have stored it.
	add(ExtEventVersion, strconv.Itoa(max(env.EventVersion, 1)))
	if env.AggregateVersion > 0 {
		add(ExtAggregateVersion, strconv.FormatInt(env.AggregateVersion, 10))
	}
	return attrs
}

// header returns the value of the producer header name, matched without
// regard to case.
func header(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

// ProducerHeaders calls set for each producer header that travels as a
// protocol header beside a CloudEvent: those a producer may use (see
// herald.ValidateHeaderName) except Content-Type, which becomes
// datacontenttype, and the names that start with a binding's attribute
// prefix ("ce-" or "ce_"), which a reader would take for attributes.
// Herald's own Herald-* headers are not sent: the extensions carry them,
// but for herald.HeaderBackfill, which marks an event a backfill wrote and
// has no extension: it is sent as it is.
func ProducerHeaders(env *herald.Envelope, set func(name, value string)) {
	if v := env.Headers[herald.HeaderBackfill]; v != "" {
		set(herald.HeaderBackfill, v)
	}
	for name, v := range env.Headers {
		lower := strings.ToLower(name)
		if herald.ValidateHeaderName(name) != nil || lower == "content-type" ||
			strings.HasPrefix(lower, "ce-") || strings.HasPrefix(lower, "ce_") {
			continue
		}
		set(name, v)
	}
}

// message builds the Herald event of a CloudEvent from its attributes
// (attr returns "" for an absent one), its data and the producer's
// protocol headers (own, which may be nil).
func message(attr func(name string) string, data []byte, own map[string]string) (herald.Message, error) {
	if v := attr("specversion"); v != "1.0" {
		return herald.Message{}, fmt.Errorf("heraldce: specversion %q is not 1.0", v)
	}
	id := attr("id")
	if _, err := uuid.Parse(id); err != nil {
		return herald.Message{}, ErrNotHerald
	}
	for _, t := range [...]struct{ attr, header string }{
		{"datacontenttype", "Content-Type"},
		{"traceparent", "traceparent"},
		{"tracestate", "tracestate"},
	} {
		if v := attr(t.attr); v != "" {
			if own == nil {
				own = map[string]string{}
			}
			if header(own, t.header) == "" {
				own[t.header] = v
			}
		}
	}
	ev, av, err := versions(attr)
	if err != nil {
		return herald.Message{}, err
	}
	return herald.Message{
		ID:               id,
		Topic:            attr(ExtTopic),
		Key:              attr(ExtKey),
		Type:             attr("type"),
		AggregateType:    attr(ExtAggregateType),
		AggregateID:      attr("subject"),
		EventVersion:     ev,
		AggregateVersion: av,
		Payload:          data,
		Headers:          own,
	}, nil
}

// versions reads the ExtEventVersion and ExtAggregateVersion extensions by
// the rules of herald.ParseVersions (an absent event version is 1), each
// error naming the extension.
func versions(attr func(name string) string) (int, int64, error) {
	ev, _, err := herald.ParseVersions(attr(ExtEventVersion), "")
	if err != nil {
		return 0, 0, fmt.Errorf("heraldce: extension %s: %w", ExtEventVersion, err)
	}
	_, av, err := herald.ParseVersions("", attr(ExtAggregateVersion))
	if err != nil {
		return 0, 0, fmt.Errorf("heraldce: extension %s: %w", ExtAggregateVersion, err)
	}
	return ev, av, nil
}
