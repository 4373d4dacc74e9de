package heraldaws

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// Message attributes Publish sets besides Herald's own (herald.HeaderID,
// herald.HeaderTopic, herald.HeaderType, herald.HeaderKey,
// herald.HeaderAggregateType, herald.HeaderAggregateID and
// herald.HeaderAggregateVersion, each present when the event's field is
// not empty, and herald.HeaderEventVersion, always). With AttrHeaders and
// AttrEncoding that is at most 10 attributes, the most SQS and SNS take.
const (
	// AttrHeaders holds the producer's headers as one JSON object of
	// strings. SQS and SNS allow 10 attributes per message and restrict
	// their names; a producer may set 64 headers with any token name.
	AttrHeaders = "Herald-Headers"
	// AttrEncoding says how the body carries the payload, when not as is:
	// EncodingBase64 or EncodingEmpty.
	AttrEncoding = "Herald-Encoding"
	// AttrContentType is, with CloudEvents on, the media type of the body:
	// heraldce.StructuredContentType.
	AttrContentType = "content-type"
)

// Values of AttrEncoding.
const (
	// EncodingBase64: the body is the payload in standard base64, because
	// the payload is not text SQS accepts (invalid UTF-8, NUL and most
	// control characters).
	EncodingBase64 = "base64"
	// EncodingEmpty: the payload is empty, and the body, which SQS and SNS
	// require to be non-empty, is the placeholder emptyBody.
	EncodingEmpty = "empty"
)

// emptyBody stands for an empty payload (see EncodingEmpty).
const emptyBody = "-"

// unkeyedGroup is the FIFO message group of the events without a key: one
// fixed group, so that they too arrive in the order they were published.
const unkeyedGroup = "herald-unkeyed"

// DefaultMaxMessageBytes is the default MaxMessageBytes: 256 KiB, the
// limit of an SNS message and of an SQS message before SQS raised it to
// 1 MiB; a batch request has the same limit.
const DefaultMaxMessageBytes = 256 << 10

// maxBatchEntries is the most entries SendMessageBatch and PublishBatch
// take.
const maxBatchEntries = 10

// message is one event as SQS or SNS carries it.
type message struct {
	i     int    // position in the batch
	dest  string // queue URL or topic ARN
	body  string
	attrs []attribute
	// size is the message's size as AWS counts it against its limit: the
	// body plus every attribute's name, data type and value.
	size int
	// group and dedup are the MessageGroupId and MessageDeduplicationId
	// of a FIFO destination, "" otherwise.
	group, dedup string
}

// attribute is one message attribute: a String, or a Binary when the
// value is not text SQS accepts.
type attribute struct {
	name   string
	value  string
	binary bool
}

func (a attribute) dataType() string {
	if a.binary {
		return "Binary"
	}
	return "String"
}

// buildMessage turns env into the message for dest, or the permanent
// error that keeps it from being sent.
func buildMessage(env *herald.Envelope, i int, dest string, maxBytes int, ce *heraldce.Config) (message, error) {
	fail := func(format string, args ...any) (message, error) {
		return message{}, herald.Permanent(fmt.Errorf("heraldaws: event %s: "+format, append([]any{env.ID}, args...)...))
	}
	if dest == "" {
		return fail("no destination (the queue URL or topic ARN function returned \"\")")
	}
	m := message{i: i, dest: dest}
	switch {
	case ce != nil:
		// JSON text, and data_base64 for a payload that is not UTF-8; a
		// JSON payload may still hold a character SQS refuses.
		m.body = string(ce.Structured(env))
		if !safeText([]byte(m.body)) {
			return fail("the payload is JSON holding a character SQS refuses (a Unicode non-character)")
		}
		m.attrs = append(m.attrs, attribute{name: AttrContentType, value: heraldce.StructuredContentType})
	case len(env.Payload) == 0:
		m.body = emptyBody
		m.attrs = append(m.attrs, attribute{name: AttrEncoding, value: EncodingEmpty})
	case safeText(env.Payload):
		m.body = string(env.Payload)
	default:
		m.body = base64.StdEncoding.EncodeToString(env.Payload)
		m.attrs = append(m.attrs, attribute{name: AttrEncoding, value: EncodingBase64})
	}
	attrs, err := eventAttributes(env, ce != nil)
	if err != nil {
		return fail("%v", err)
	}
	m.attrs = append(m.attrs, attrs...)
	m.size = len(m.body)
	for _, a := range m.attrs {
		m.size += len(a.name) + len(a.dataType()) + len(a.value)
	}
	if m.size > maxBytes {
		return fail("message of %d bytes (payload %d bytes, attributes included) is over the limit of %d (MaxMessageBytes)",
			m.size, len(env.Payload), maxBytes)
	}
	if fifo(dest) {
		m.group, m.dedup = groupID(env.Key), env.ID
	}
	return m, nil
}

// eventAttributes returns Herald's attributes of env and, in AttrHeaders,
// the producer's headers, as herald.EventHeaders maps them. For a
// CloudEvent (ce), whose attributes carry Herald's fields, it returns
// AttrHeaders alone, with the headers heraldce.ProducerHeaders lets
// through.
func eventAttributes(env *herald.Envelope, ce bool) ([]attribute, error) {
	var attrs []attribute
	var producer map[string]string
	each := herald.EventHeaders
	if ce {
		each = heraldce.ProducerHeaders
	}
	each(env, func(name, v string) {
		switch name {
		case herald.HeaderID, herald.HeaderTopic, herald.HeaderType, herald.HeaderKey,
			herald.HeaderAggregateType, herald.HeaderAggregateID,
			herald.HeaderEventVersion, herald.HeaderAggregateVersion:
			attrs = append(attrs, textAttribute(name, v))
		default:
			if producer == nil {
				producer = make(map[string]string, len(env.Headers))
			}
			producer[name] = v
		}
	})
	if len(producer) > 0 {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(producer); err != nil {
			return nil, fmt.Errorf("encoding headers: %w", err)
		}
		attrs = append(attrs, textAttribute(AttrHeaders, strings.TrimSuffix(buf.String(), "\n")))
	}
	return attrs, nil
}

// textAttribute carries v as a String attribute when SQS accepts it as
// text, and as a Binary one holding its bytes otherwise.
func textAttribute(name, v string) attribute {
	return attribute{name: name, value: v, binary: !safeText([]byte(v))}
}

// safeText reports whether SQS accepts b as text: valid UTF-8 of the
// characters #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD and #x10000
// to #x10FFFF. An SNS message goes through the same test, since SNS hands
// it on to SQS subscribers.
func safeText(b []byte) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == utf8.RuneError && size <= 1:
			return false
		case r == '\t' || r == '\n' || r == '\r':
		case r < 0x20, r > 0xD7FF && r < 0xE000, r == 0xFFFE || r == 0xFFFF:
			return false
		}
		b = b[size:]
	}
	return true
}

// fifo reports whether dest, a queue URL or topic ARN, names a FIFO queue
// or topic: AWS requires their names to end in ".fifo".
func fifo(dest string) bool { return strings.HasSuffix(dest, ".fifo") }

// groupID returns the MessageGroupId of an event's key: the key itself
// when AWS accepts it (1 to 128 printable ASCII characters, no space), a
// hash of it otherwise, and unkeyedGroup for an empty key. Two keys that
// share a group are delivered in one order: stricter than needed, never
// looser.
func groupID(key string) string {
	if key == "" {
		return unkeyedGroup
	}
	ok := len(key) <= 128
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] > ' ' && key[i] < 0x7f
	}
	if ok {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "herald-sha256-" + hex.EncodeToString(sum[:])
}
