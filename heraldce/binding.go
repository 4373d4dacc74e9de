package heraldce

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
)

// Header is one protocol header of a received message.
type Header struct {
	Name, Value string
}

// HTTPBinary calls set for the headers of env as an HTTP binary-mode
// message (HTTP protocol binding 1.0.2, 3.1): "ce-" and the attribute name
// for each attribute but datacontenttype, which is the Content-Type. Values
// are percent-encoded where the binding asks for it (space, '"', '%' and
// bytes outside printable ASCII). The body is the payload.
func (c *Config) HTTPBinary(env *herald.Envelope, set func(name, value string)) {
	for _, a := range c.Attributes(env) {
		if a.Name == "datacontenttype" {
			set("Content-Type", a.Value)
			continue
		}
		set("ce-"+a.Name, percentEncode(a.Value))
	}
}

// KafkaBinary calls set for the headers of env as a Kafka binary-mode
// record (Kafka protocol binding 1.0, 3.2): "ce_" and the attribute name
// for each attribute but datacontenttype, which is the content-type
// header. Values are UTF-8 as they are. The record value is the payload.
func (c *Config) KafkaBinary(env *herald.Envelope, set func(name, value string)) {
	for _, a := range c.Attributes(env) {
		if a.Name == "datacontenttype" {
			set("content-type", a.Value)
			continue
		}
		set("ce_"+a.Name, a.Value)
	}
}

// Binary calls set for the attributes of env as a binary-mode message of a
// binding that names each attribute prefix and the attribute name, in
// headers, properties or attributes of the protocol's own, and carries
// datacontenttype in a content-type field of its own: set gets every
// attribute but datacontenttype, whose value Binary returns ("" when the
// event has none). Values are the attributes' canonical strings, as they
// are. The prefixes of the bindings: PrefixAMQP, PrefixPubSub and, for
// MQTT 5 user properties, "" (the names unchanged).
func (c *Config) Binary(env *herald.Envelope, prefix string, set func(name, value string)) (contentType string) {
	for _, a := range c.Attributes(env) {
		if a.Name == "datacontenttype" {
			contentType = a.Value
			continue
		}
		set(prefix+a.Name, a.Value)
	}
	return contentType
}

// Attribute name prefixes of binary mode.
const (
	// PrefixAMQP is the AMQP binding's (1.0, 3.1.3.1): application
	// properties, or AMQP 0-9-1 headers, named "cloudEvents:id" and so on.
	PrefixAMQP = "cloudEvents:"
	// PrefixPubSub is the Google Cloud Pub/Sub binding's (3.1.3.1), and
	// the HTTP binding's: message attributes named "ce-id" and so on.
	PrefixPubSub = "ce-"
	// PrefixKafka is the Kafka binding's (3.2.3.1): headers named "ce_id"
	// and so on.
	PrefixKafka = "ce_"
)

// percentEncode escapes what the HTTP binding says a header value must not
// hold as is.
func percentEncode(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Structured returns env in the JSON event format, the body of a
// structured-mode message (whose content type is StructuredContentType).
// The payload is the data member, byte for byte, when it is JSON and the
// content type says so (or is absent); otherwise data_base64.
func (c *Config) Structured(env *herald.Envelope) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, a := range c.Attributes(env) {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, a.Name)
		b.WriteByte(':')
		writeString(&b, a.Value)
	}
	switch {
	case len(env.Payload) == 0:
	case isJSONData(header(env.Headers, "Content-Type"), env.Payload):
		b.WriteString(`,"data":`)
		b.Write(env.Payload)
	default:
		b.WriteString(`,"data_base64":`)
		writeString(&b, base64.StdEncoding.EncodeToString(env.Payload))
	}
	b.WriteByte('}')
	return b.Bytes()
}

func writeString(b *bytes.Buffer, s string) {
	out, _ := json.Marshal(s) // a string always marshals
	b.Write(out)
}

// isJSONData reports whether payload can be the data member as JSON:
// the content type is JSON or absent (the JSON format reads an absent one
// as application/json), and the payload is a JSON value with no space
// around it, so a reader gets it back byte for byte.
func isJSONData(contentType string, payload []byte) bool {
	if contentType != "" && !isJSONType(contentType) {
		return false
	}
	if len(bytes.TrimSpace(payload)) != len(payload) {
		return false
	}
	// JSON text is UTF-8 (RFC 8259, 8.1), which json.Valid does not check.
	return utf8.Valid(payload) && json.Valid(payload)
}

func isJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// IsStructured reports whether a message of this content type holds a
// structured-mode event.
func IsStructured(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/cloudevents+json"
}

// ParseHTTP reads back the event of an HTTP request Herald sent with
// CloudEvents on, in either mode (told apart by the Content-Type).
func ParseHTTP(h http.Header, body []byte) (herald.Message, error) {
	headers := make([]Header, 0, len(h))
	for name, vs := range h {
		if len(vs) > 0 {
			headers = append(headers, Header{name, vs[0]})
		}
	}
	if IsStructured(h.Get("Content-Type")) {
		return ParseStructured(headers, body)
	}
	return parseBinary("ce-", "content-type", percentDecode, headers, body)
}

// ParseKafka reads back the event of a Kafka record Herald sent with
// CloudEvents on, in either mode (told apart by the content-type header).
// Where a header repeats, the first one counts.
func ParseKafka(headers []Header, value []byte) (herald.Message, error) {
	for _, h := range headers {
		if strings.EqualFold(h.Name, "content-type") {
			if IsStructured(h.Value) {
				return ParseStructured(headers, value)
			}
			break
		}
	}
	return parseBinary("ce_", "content-type", nil, headers, value)
}

// ParseBinary reads back a binary-mode event Herald sent through Binary:
// the attributes are the headers whose names start with prefix, compared
// without regard to case ("" takes every header for an attribute, as the
// MQTT binding does); datacontenttype is contentType, the value of the
// protocol's content-type field ("" when absent); data is the payload. The
// other headers are returned as the producer's. Where a header repeats, the
// first one counts.
func ParseBinary(prefix string, headers []Header, contentType string, data []byte) (herald.Message, error) {
	if contentType != "" {
		headers = append([]Header{{contentTypeHeader, contentType}}, headers...)
	}
	return parseBinary(strings.ToLower(prefix), contentTypeHeader, nil, headers, data)
}

// contentTypeHeader stands for the content-type field in ParseBinary: a
// name no header of the binding can have, as it holds a NUL.
const contentTypeHeader = "\x00content-type"

// parseBinary reads a binary-mode message: attributes from the headers
// named prefix+name, datacontenttype from the contentType header, the
// other headers as the producer's.
func parseBinary(prefix, contentType string, decode func(string) string, headers []Header, data []byte) (herald.Message, error) {
	attrs := map[string]string{}
	var own map[string]string
	for _, h := range headers {
		lower := strings.ToLower(h.Name)
		name, isAttr := strings.CutPrefix(lower, prefix)
		switch {
		case lower == contentType:
			name = "datacontenttype"
		case !isAttr:
			if own == nil {
				own = map[string]string{}
			}
			if _, seen := own[h.Name]; !seen {
				own[h.Name] = h.Value
			}
			continue
		}
		if _, seen := attrs[name]; !seen {
			v := h.Value
			if decode != nil {
				v = decode(v)
			}
			attrs[name] = v
		}
	}
	if attrs["id"] == "" {
		return herald.Message{}, errors.New("heraldce: not a CloudEvent (no " + prefix + "id header)")
	}
	return message(func(name string) string { return attrs[name] }, data, own)
}

// percentDecode undoes percentEncode; a value that is not valid
// percent-encoding is taken as it is.
func percentDecode(v string) string {
	if !strings.Contains(v, "%") {
		return v
	}
	out, err := url.PathUnescape(v)
	if err != nil {
		return v
	}
	return out
}

// ParseStructured reads back a structured-mode event from body; headers are
// the message's protocol headers, whose names other than Content-Type are
// returned as the producer's headers.
func ParseStructured(headers []Header, body []byte) (herald.Message, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return herald.Message{}, fmt.Errorf("heraldce: reading a structured event: %w", err)
	}
	attr := func(name string) string {
		var s string
		if json.Unmarshal(raw[name], &s) != nil {
			return versionNumber(name, raw[name])
		}
		return s
	}
	data, err := structuredData(raw, attr("datacontenttype"))
	if err != nil {
		return herald.Message{}, err
	}
	var own map[string]string
	for _, h := range headers {
		if strings.EqualFold(h.Name, "content-type") {
			continue
		}
		if own == nil {
			own = map[string]string{}
		}
		if _, seen := own[h.Name]; !seen {
			own[h.Name] = h.Value
		}
	}
	return message(attr, data, own)
}

// versionNumber returns the text of a version extension written as a JSON
// number, as the JSON format allows an integer extension to be (Herald
// writes strings, but an event re-encoded by a CloudEvents SDK may hold
// a number), and "" for any other attribute or value. A number that is not
// a plain decimal integer comes back as it is, for ParseVersions to refuse.
func versionNumber(name string, v json.RawMessage) string {
	if name != ExtEventVersion && name != ExtAggregateVersion || len(v) == 0 || v[0] == '"' {
		return ""
	}
	var n json.Number
	if json.Unmarshal(v, &n) != nil {
		return string(v)
	}
	return n.String()
}

// structuredData returns the data of a JSON-format event: data_base64
// decoded, data as it is when the content type is JSON (or absent), the
// text of a data string otherwise.
func structuredData(raw map[string]json.RawMessage, contentType string) ([]byte, error) {
	if b64, ok := raw["data_base64"]; ok {
		var s string
		if err := json.Unmarshal(b64, &s); err != nil {
			return nil, fmt.Errorf("heraldce: data_base64 is not a string: %w", err)
		}
		data, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("heraldce: data_base64: %w", err)
		}
		return data, nil
	}
	data, ok := raw["data"]
	if !ok {
		return nil, nil
	}
	if contentType == "" || isJSONType(contentType) {
		return []byte(data), nil
	}
	// Text data of another content type is a JSON string; anything else
	// is taken as it is.
	var s string
	if json.Unmarshal(data, &s) == nil {
		return []byte(s), nil
	}
	return []byte(data), nil
}
