package sqlstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
)

// The outbox table is a contract that other programs write with plain SQL.
// What follows is how the drivers read rows Herald did not write: a value
// the column types admit but Herald never writes must not stop the relay.

// MaxAttempts is the most the attempts column holds: the table refuses more
// (migration 004), and a claim's count stops there instead of overflowing
// the column. No retry policy that ends comes near it: a million attempts at
// the default five-minute backoff cap take nine years.
const MaxAttempts = 1_000_000

// ClaimedRow is one row a claim took: its envelope, or why there is none.
type ClaimedRow struct {
	herald.Envelope
	// Unreadable says why the row cannot become an Envelope ("created_at
	// is infinity"); empty when it can.
	Unreadable string
}

// DecodeHeaders reads the headers column of a claimed row: a JSON object
// whose values are strings. A null value is a header that is not set (JSON
// encoders write null for an absent optional field). Any other value (a
// number, a boolean, an object, an array) is an error: how a producer meant
// it to be spelt on the broker is a guess Herald does not make, and the row
// goes to the dead letters saying which header it was.
func DecodeHeaders(raw []byte) (map[string]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "{}" {
		return nil, nil
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("headers are not valid UTF-8")
	}
	if out, ok := plainHeaders(raw); ok {
		return out, nil
	}
	return decodeHeadersJSON(raw)
}

// plainHeaders reads the usual headers column without encoding/json: an
// object whose names and values are strings free of escapes and control
// characters (or null values), as PostgreSQL, MySQL and Herald's writers
// print them. ok is false for anything else, which decodeHeadersJSON
// reads; where ok is true the result is decodeHeadersJSON's
// (FuzzPlainHeadersAgreeWithJSON). Every claimed and streamed event reads
// its headers, and encoding/json's map decoding was half of reading a
// streamed event.
func plainHeaders(raw []byte) (map[string]string, bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	var out map[string]string
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return nil, skipSpace(raw, i+1) == len(raw)
	}
	for {
		name, next, ok := plainString(raw, i)
		if !ok {
			return nil, false
		}
		i = skipSpace(raw, next)
		if i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		if i+4 <= len(raw) && string(raw[i:i+4]) == "null" {
			delete(out, name) // a later null unsets an earlier value, as encoding/json's last one wins
			i += 4
		} else {
			value, next, ok := plainString(raw, i)
			if !ok {
				return nil, false
			}
			if out == nil {
				out = make(map[string]string, 2)
			}
			out[name], i = value, next
		}
		i = skipSpace(raw, i)
		if i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			if skipSpace(raw, i+1) != len(raw) {
				return nil, false
			}
			if len(out) == 0 {
				return nil, true
			}
			return out, true
		default:
			return nil, false
		}
	}
}

// plainString reads the JSON string at raw[i] when it has no escape and
// no control character, returning it and the index after its closing
// quote.
func plainString(raw []byte, i int) (string, int, bool) {
	if i >= len(raw) || raw[i] != '"' {
		return "", 0, false
	}
	for j := i + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			return string(raw[i+1 : j]), j + 1, true
		case c == '\\' || c < 0x20:
			return "", 0, false
		}
	}
	return "", 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(raw []byte, i int) int {
	for i < len(raw) && (raw[i] == ' ' || raw[i] == '\t' || raw[i] == '\n' || raw[i] == '\r') {
		i++
	}
	return i
}

// decodeHeadersJSON is DecodeHeaders with encoding/json, for any valid
// UTF-8 column.
func decodeHeadersJSON(raw []byte) (map[string]string, error) {
	// The common case, an object of strings (and nulls), in one pass; any
	// other value is read again below, to say which header is wrong.
	var strs map[string]*string
	if raw[0] == '{' && json.Unmarshal(raw, &strs) == nil {
		out := make(map[string]string, len(strs))
		for name, v := range strs {
			if v != nil {
				out[name] = *v
			}
		}
		if len(out) == 0 {
			return nil, nil
		}
		return out, nil
	}
	var m map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil {
		return nil, errors.New("headers are not a JSON object")
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad header by name, the same every time
	out := make(map[string]string, len(m))
	for _, name := range names {
		v := m[name]
		switch v[0] {
		case 'n': // null
			continue
		case '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, fmt.Errorf("header %s: %w", quoteName(name), err)
			}
			out[name] = s
		default:
			return nil, fmt.Errorf("header %s is %s, not a string", quoteName(name), jsonKind(v[0]))
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// DisplayHeaders reads a headers column for operators and tests, who see a
// row as it is: string values as they are, others as their JSON text, so
// that nothing is hidden; nil when the column is not a JSON object.
func DisplayHeaders(raw []byte) map[string]string {
	if len(raw) == 0 || string(raw) == "{}" {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var s string
		if len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out
}

// jsonKind names the JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

// quoteName quotes a header name for an error, cut short: the name came
// from another program and the error lands in last_error.
func quoteName(name string) string {
	const most = 64
	if len(name) > most {
		cut := most
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...", name[:cut])
	}
	return fmt.Sprintf("%q", name)
}

// Age turns an age the database computed, n units of unit, into a
// Duration: 0 when negative or not a number, and the longest Duration when
// it is longer than a Duration holds (a row dated in a far year, or at
// minus infinity), never a wrapped-around negative.
func Age(n float64, unit time.Duration) time.Duration {
	d := n * float64(unit)
	switch {
	case !(d > 0): // NaN too
		return 0
	case d >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(d)
}
