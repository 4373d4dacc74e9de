package herald

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Message is one event to write into the outbox.
type Message struct {
	// ID identifies the event everywhere: broker-side deduplication, the
	// consumer's inbox, logs. A UUID; a UUIDv7 is generated when empty.
	ID string
	// Topic names the destination (a NATS subject, a Kafka topic). Required.
	Topic string
	// Key is the ordering key. Defaults to AggregateID.
	Key string
	// Type is the event type, such as "order.placed".
	Type string
	// AggregateType and AggregateID name the business object the event
	// describes, such as "order" and "42".
	AggregateType string
	AggregateID   string
	// EventVersion is the version of the payload's schema, so that
	// consumers can read the old and the new shape of an event side by
	// side. Zero means 1; negative is refused.
	EventVersion int
	// AggregateVersion is, optionally, the aggregate's version after this
	// event, for consumers that reject a stale transition (an event whose
	// version is not above the last one they applied). Versions start at
	// 1; zero means none; negative is refused.
	AggregateVersion int64
	// Payload is the event body, carried to the broker byte for byte.
	Payload []byte
	// Headers are carried to the broker. Names are HTTP token characters;
	// names reserved by Herald or a broker are refused (see ValidateHeaderName).
	Headers map[string]string
	// AvailableAt delays delivery until the given time. Zero means now.
	AvailableAt time.Time
}

// Envelope is a committed message as a relay hands it to a Publisher.
type Envelope struct {
	Message
	// Seq is the row's sequence number, increasing in insert order.
	Seq int64
	// Attempt counts publish attempts, this one included (1 on the first).
	Attempt int
	// CreatedAt is when the row was written, by the database clock.
	CreatedAt time.Time
	// Ordered is set by the relay when it keeps the event's key in commit
	// order: a publisher must not deliver it after an earlier event of
	// its key failed in the same batch (see Publisher and SendInRounds).
	// False for an empty key, an unordered topic or an unordered relay.
	Ordered bool
}

// orderKey returns the key that orders env, and false when the relay
// keeps no order for it (an unordered topic or relay, an empty key). A
// TopicKey, not a joined string: the publish path asks it several times
// per event, and it allocates nothing.
func orderKey(env *Envelope) (TopicKey, bool) {
	if !env.Ordered || env.Key == "" {
		return TopicKey{}, false
	}
	return TopicKey{env.Topic, env.Key}, true
}

// Limits on message fields. They keep rows small enough to claim in bulk
// and keep broker header blocks within every supported broker's limits.
const (
	MaxTopicLen       = 255
	MaxTextFieldLen   = 1024
	MaxHeaderNameLen  = 256
	MaxHeaderValueLen = 8192
	MaxHeaders        = 64
	// MaxEventVersion is the highest EventVersion: the column is a 32-bit
	// integer in every database.
	MaxEventVersion = 1<<31 - 1
)

// DefaultMaxPayloadBytes is the default payload cap of a Writer: 1 MiB.
const DefaultMaxPayloadBytes = 1 << 20

// NewID returns a new event id: a UUIDv7, so ids sort by creation time.
func NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only when the system's random source fails.
		panic(fmt.Sprintf("herald: generating event id: %v", err))
	}
	return id.String()
}

// Prepare fills defaults (ID, Key) and validates the messages, returning
// copies ready to insert. It is what Writer.WriteTx runs before the driver
// writes anything; drivers and tools that insert rows themselves use it too.
// maxPayload <= 0 means DefaultMaxPayloadBytes.
func Prepare(msgs []Message, maxPayload int) ([]Message, error) {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayloadBytes
	}
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = NewID()
		} else {
			u, err := uuid.Parse(m.ID)
			if err != nil {
				return nil, &ValidationError{i, "id", "not a UUID"}
			}
			m.ID = u.String()
		}
		if m.Key == "" {
			m.Key = m.AggregateID
		}
		if m.EventVersion == 0 {
			m.EventVersion = 1
		}
		if err := validate(i, &m, maxPayload); err != nil {
			return nil, err
		}
		out[i] = m
	}
	return out, nil
}

func validate(i int, m *Message, maxPayload int) error {
	return validateMessage(i, m, maxPayload, false)
}

// validateMessage is validate; stored says m is a row read from the
// outbox, which may carry HeaderBackfill: Herald's own mark of an event a
// backfill wrote (heraldbackfill), which WriteTx refuses from producers.
func validateMessage(i int, m *Message, maxPayload int, stored bool) error {
	if m.Topic == "" {
		return &ValidationError{i, "topic", "required"}
	}
	if len(m.Topic) > MaxTopicLen {
		return &ValidationError{i, "topic", fmt.Sprintf("longer than %d bytes", MaxTopicLen)}
	}
	for _, c := range m.Topic {
		if c <= ' ' || c == 0x7f {
			return &ValidationError{i, "topic", "contains whitespace or a control character"}
		}
	}
	for _, f := range [...]struct{ name, v string }{
		{"topic", m.Topic}, {"key", m.Key}, {"type", m.Type},
		{"aggregate_type", m.AggregateType}, {"aggregate_id", m.AggregateID},
	} {
		if err := checkText(f.v, MaxTextFieldLen); err != "" {
			return &ValidationError{i, f.name, err}
		}
	}
	if m.EventVersion < 0 || m.EventVersion > MaxEventVersion {
		return &ValidationError{i, "event_version", fmt.Sprintf("%d is not between 1 and %d", m.EventVersion, MaxEventVersion)}
	}
	if m.AggregateVersion < 0 {
		return &ValidationError{i, "aggregate_version", fmt.Sprintf("%d is negative", m.AggregateVersion)}
	}
	if len(m.Payload) > maxPayload {
		return &ValidationError{i, "payload", fmt.Sprintf("%d bytes is over the cap of %d", len(m.Payload), maxPayload)}
	}
	if len(m.Headers) > MaxHeaders {
		return &ValidationError{i, "headers", fmt.Sprintf("more than %d headers", MaxHeaders)}
	}
	for name, value := range m.Headers {
		if err := ValidateHeaderName(name); err != nil && (!stored || name != HeaderBackfill) {
			return &ValidationError{i, "headers", err.Error()}
		}
		if reason := checkText(value, MaxHeaderValueLen); reason != "" {
			return &ValidationError{i, "headers[" + name + "]", reason}
		}
		if strings.ContainsAny(value, "\r\n") {
			return &ValidationError{i, "headers[" + name + "]", "contains CR or LF"}
		}
	}
	return nil
}

// checkText returns why s is not acceptable text, or "".
func checkText(s string, max int) string {
	switch {
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// reservedHeaders are names a producer may not set: Herald's own headers,
// broker control headers and hop-by-hop HTTP headers. Lower case.
var reservedHeaders = map[string]bool{
	"cc": true, "bcc": true, // RabbitMQ sender-selected distribution
	"connection": true, "keep-alive": true, "proxy-authenticate": true,
	"proxy-authorization": true, "proxy-connection": true, "te": true,
	"trailer": true, "transfer-encoding": true, "upgrade": true,
	"host": true, "content-length": true,
}

// reservedPrefixes are header name prefixes a producer may not use. Lower case.
var reservedPrefixes = []string{"herald-", "nats-", "webhook-", "kafka_", "x-death"}

// ValidateHeaderName reports why name cannot be a producer-set header:
// empty, too long, not an HTTP token (which also refuses CR, LF and spaces),
// or reserved by Herald (Herald-*) or a broker (Nats-*, CC, BCC, hop-by-hop
// HTTP headers, webhook-* signing headers).
func ValidateHeaderName(name string) error {
	if name == "" {
		return errors.New("empty header name")
	}
	if len(name) > MaxHeaderNameLen {
		return fmt.Errorf("header name longer than %d bytes", MaxHeaderNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("header name %q has a character outside the HTTP token set", name)
		}
	}
	lower := strings.ToLower(name)
	if reservedHeaders[lower] {
		return fmt.Errorf("header name %q is reserved", name)
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(lower, p) {
			return fmt.Errorf("header name %q is reserved (prefix %q)", name, p)
		}
	}
	return nil
}

// isTokenChar reports whether c is an RFC 9110 tchar.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
