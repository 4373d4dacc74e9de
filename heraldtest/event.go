package heraldtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
)

// TB is the part of *testing.T the assertions use. *testing.T, *testing.B,
// *testing.F and testing.TB satisfy it, and so do the test types of other
// frameworks. As with t.Fatalf, call the assertions from the goroutine
// running the test.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Event describes an expected event. Fields left empty match anything, so
// an Event says only what the test cares about.
type Event struct {
	// ID is the event id; compared without regard to case.
	ID string
	// Topic, Key, Type, AggregateType and AggregateID must equal the
	// event's fields. Key is the stored key: a message written without one
	// has its AggregateID as key.
	Topic         string
	Key           string
	Type          string
	AggregateType string
	AggregateID   string
	// Payload, when not nil, must equal the payload byte for byte. To
	// expect an empty payload, use []byte{}.
	Payload []byte
	// JSON, when not nil, must be equal to the payload as JSON: key order,
	// spacing and the spelling of numbers (1, 1.0, 1e0) do not matter. A
	// string, []byte or json.RawMessage holds JSON text; any other value
	// is encoded with encoding/json first, so a struct of the event's
	// schema may be given.
	JSON any
	// Headers must each be present on the event with the same value; the
	// event may carry other headers.
	Headers map[string]string
}

// Matches reports whether env is an event e describes. It can serve as a
// Failure's Match: heraldtest.Event{Key: "order-2"}.Matches.
func (e Event) Matches(env herald.Envelope) bool {
	c, err := e.compile()
	return err == nil && len(c.mismatches(env)) == 0
}

// expectation is an Event with its JSON decoded once.
type expectation struct {
	Event
	json     any // decoded Event.JSON; valid when hasJSON
	hasJSON  bool
	jsonText []byte
}

func (e Event) compile() (expectation, error) {
	x := expectation{Event: e}
	if e.JSON == nil {
		return x, nil
	}
	var text []byte
	switch v := e.JSON.(type) {
	case string:
		text = []byte(v)
	case []byte:
		text = v
	case json.RawMessage:
		text = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return x, fmt.Errorf("Event.JSON cannot be encoded: %w", err)
		}
		text = b
	}
	v, err := decodeJSON(text)
	if err != nil {
		return x, fmt.Errorf("Event.JSON is not valid JSON: %w (%s)", err, preview(text))
	}
	x.json, x.hasJSON, x.jsonText = v, true, text
	return x, nil
}

func compileAll(events []Event) ([]expectation, error) {
	out := make([]expectation, len(events))
	for i, e := range events {
		x, err := e.compile()
		if err != nil {
			return nil, fmt.Errorf("expected event %d: %w", i+1, err)
		}
		out[i] = x
	}
	return out, nil
}

// mismatches says how env differs from the expectation, nothing when it
// matches.
func (x expectation) mismatches(env herald.Envelope) []string {
	var out []string
	if x.ID != "" && !strings.EqualFold(x.ID, env.ID) {
		out = append(out, fmt.Sprintf("id is %s, want %s", env.ID, x.ID))
	}
	for _, f := range [...]struct{ name, want, got string }{
		{"topic", x.Topic, env.Topic},
		{"key", x.Key, env.Key},
		{"type", x.Type, env.Type},
		{"aggregate type", x.AggregateType, env.AggregateType},
		{"aggregate id", x.AggregateID, env.AggregateID},
	} {
		if f.want != "" && f.want != f.got {
			out = append(out, fmt.Sprintf("%s is %q, want %q", f.name, f.got, f.want))
		}
	}
	if x.Payload != nil && !bytes.Equal(x.Payload, env.Payload) {
		out = append(out, fmt.Sprintf("payload is %s, want %s", preview(env.Payload), preview(x.Payload)))
	}
	if x.hasJSON {
		got, err := decodeJSON(env.Payload)
		if err != nil {
			out = append(out, fmt.Sprintf("payload is not JSON (%v): %s", err, preview(env.Payload)))
		} else if diff := jsonDiff("$", got, x.json); diff != "" {
			out = append(out, "payload differs from the expected JSON at "+diff)
		}
	}
	names := make([]string, 0, len(x.Headers))
	for name := range x.Headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		got, ok := env.Headers[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("header %q is missing, want %q", name, x.Headers[name]))
		case got != x.Headers[name]:
			out = append(out, fmt.Sprintf("header %q is %q, want %q", name, got, x.Headers[name]))
		}
	}
	return out
}

// anyEvent is how an Event that sets nothing shows.
const anyEvent = "{any event}"

// String shows the fields an Event sets, for failure messages.
func (e Event) String() string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%s: %q", name, v))
		}
	}
	add("ID", e.ID)
	add("Topic", e.Topic)
	add("Key", e.Key)
	add("Type", e.Type)
	add("AggregateType", e.AggregateType)
	add("AggregateID", e.AggregateID)
	if e.Payload != nil {
		parts = append(parts, "Payload: "+preview(e.Payload))
	}
	if e.JSON != nil {
		if x, err := e.compile(); err == nil {
			parts = append(parts, "JSON: "+preview(x.jsonText))
		} else {
			parts = append(parts, fmt.Sprintf("JSON: %v", e.JSON))
		}
	}
	if len(e.Headers) > 0 {
		parts = append(parts, "Headers: "+headerText(e.Headers))
	}
	if len(parts) == 0 {
		return anyEvent
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// describe shows an event's fields on one line, for failure messages.
func describe(env herald.Envelope) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d id %s topic %q", env.Seq, env.ID, env.Topic)
	for _, f := range [...]struct{ name, v string }{
		{"key", env.Key}, {"type", env.Type},
		{"aggregate type", env.AggregateType}, {"aggregate id", env.AggregateID},
	} {
		if f.v != "" {
			fmt.Fprintf(&b, " %s %q", f.name, f.v)
		}
	}
	fmt.Fprintf(&b, " payload %s", preview(env.Payload))
	if len(env.Headers) > 0 {
		fmt.Fprintf(&b, " headers %s", headerText(env.Headers))
	}
	return b.String()
}

func headerText(h map[string]string) string {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%q: %q", name, h[name])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// previewLen bounds the payload text in a failure message: enough to
// recognise an event, short enough to keep one event on a line.
const previewLen = 200

// preview shows a payload as its text when it is printable (JSON usually
// is), quoted otherwise, cut at previewLen bytes.
func preview(p []byte) string {
	cut := ""
	if len(p) > previewLen {
		cut = fmt.Sprintf("...(%d bytes)", len(p))
		p = p[:previewLen]
	}
	if len(p) == 0 {
		return "(empty)" + cut
	}
	if printable(p) {
		return string(p) + cut
	}
	return fmt.Sprintf("%q", p) + cut
}

func printable(p []byte) bool {
	for len(p) > 0 {
		r, size := utf8.DecodeRune(p)
		if r == utf8.RuneError && size <= 1 {
			// The end of a payload cut in the middle of a rune is still
			// text; a broken rune anywhere else is not.
			return !utf8.FullRune(p)
		}
		if !unicode.IsPrint(r) {
			return false
		}
		p = p[size:]
	}
	return true
}

// decodeJSON decodes one JSON value, numbers kept as written so that no
// precision is lost before they are compared.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more data after the JSON value")
	}
	return v, nil
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// jsonDiff returns the path of the first difference between got and want
// and what differs there, or "" when they are equal.
func jsonDiff(path string, got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		keys := make([]string, 0, len(w)+len(g))
		for k := range w {
			keys = append(keys, k)
		}
		for k := range g {
			if _, ok := w[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := path + "." + k
			if !plainKey.MatchString(k) {
				p = fmt.Sprintf("%s[%q]", path, k)
			}
			gv, gok := g[k]
			wv, wok := w[k]
			switch {
			case !gok:
				return fmt.Sprintf("%s: missing, want %s", p, jsonPreview(wv))
			case !wok:
				return fmt.Sprintf("%s: %s is not expected", p, jsonPreview(gv))
			}
			if d := jsonDiff(p, gv, wv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok {
			break
		}
		for i := range min(len(g), len(w)) {
			if d := jsonDiff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); d != "" {
				return d
			}
		}
		if len(g) != len(w) {
			return fmt.Sprintf("%s: %d elements, want %d", path, len(g), len(w))
		}
		return ""
	case json.Number:
		if g, ok := got.(json.Number); ok && numbersEqual(g, w) {
			return ""
		}
	default: // string, bool, nil
		if got == want {
			return ""
		}
	}
	return fmt.Sprintf("%s: %s, want %s", path, jsonPreview(got), jsonPreview(want))
}

// numbersEqual compares JSON numbers exactly, whatever their spelling.
func numbersEqual(a, b json.Number) bool {
	x, okx := new(big.Rat).SetString(string(a))
	y, oky := new(big.Rat).SetString(string(b))
	if !okx || !oky {
		return a == b
	}
	return x.Cmp(y) == 0
}

func jsonPreview(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return preview(b)
}
