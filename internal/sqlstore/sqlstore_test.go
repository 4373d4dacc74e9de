package sqlstore

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
)

// The headers column holds whatever other programs wrote. Reading it must
// never panic; an object of strings must come back as it went in, for the
// relay and for operators alike; and the relay gets either headers or an
// error, never both.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"n":3,"o":{"x":[1]}}`, `[]`, `null`, `{"a":"\u0000"}`, ``, `{`,
		`{"a":null}`, " {\"a\":\"b\"} ", "{\"a\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := DecodeHeaders(raw)
		shown := DisplayHeaders(raw)
		if err != nil {
			require.Nil(t, got)
		}
		var want map[string]string
		if utf8.Valid(raw) && !bytes.Contains(raw, []byte("null")) && json.Unmarshal(raw, &want) == nil && len(want) > 0 {
			require.NoError(t, err)
			require.Equal(t, want, got)
			require.Equal(t, want, shown)
		}
	})
}

// Where the reader without encoding/json takes a column, it reads what
// encoding/json reads, and it takes the usual columns.
func FuzzPlainHeadersAgreeWithJSON(f *testing.F) {
	for _, s := range []string{`{}`, ` { } `, `{"a":"b"}`, `{"source": "herald-bench", "traceparent": "00-ab-cd-01"}`,
		`{"a":"x","a":null}`, `{"a":null,"a":"x"}`, `{"a":null}`, `{"a":"b",}`, `{"a":"\n"}`, `{"a":"b"}x`,
		`{"a" : "b" , "c":"d"}`, `{"a":nullx}`, `{"a":1}`, "{\"a\":\"\t\"}", `{"é":"ü"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		raw = bytes.TrimSpace(raw) // as DecodeHeaders does first
		if !utf8.Valid(raw) {
			return
		}
		got, ok := plainHeaders(raw)
		if !ok {
			return
		}
		want, err := decodeHeadersJSON(raw)
		require.NoError(t, err, "%q", raw)
		require.Equal(t, want, got, "%q", raw)
	})
}

func TestPlainHeadersTakeTheUsualColumns(t *testing.T) {
	for raw, want := range map[string]map[string]string{
		`{"source": "herald-bench"}`:        {"source": "herald-bench"},
		`{"a": "1", "b": "", "gone": null}`: {"a": "1", "b": ""},
		` {} `:                              nil,
		`{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`: {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	} {
		got, ok := plainHeaders([]byte(raw))
		require.True(t, ok, raw)
		require.Equal(t, want, got, raw)
	}
	for _, raw := range []string{`{"a": "x\"y"}`, `{"a": 1}`, `["a"]`, `{"a": "b"`, `{"a": "b"} x`} {
		_, ok := plainHeaders([]byte(raw))
		require.False(t, ok, "%s is left to encoding/json", raw)
	}
}

// BenchmarkDecodeHeaders compares the reader without encoding/json
// (Plain) with encoding/json's (JSON) on a usual column.
func BenchmarkDecodeHeaders(b *testing.B) {
	raw := []byte(`{"source": "herald-bench", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`)
	b.Run("Plain", func(b *testing.B) {
		for b.Loop() {
			if _, err := DecodeHeaders(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("JSON", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodeHeadersJSON(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestDecodeHeadersTakesStringsAndRefusesOtherValues(t *testing.T) {
	for _, tc := range []struct {
		raw     string
		want    map[string]string
		wantErr string
	}{
		{raw: ``},
		{raw: `{}`},
		{raw: ` {"a": "1", "b": "x\ny"} `, want: map[string]string{"a": "1", "b": "x\ny"}},
		{raw: `{"gone": null, "kept": ""}`, want: map[string]string{"kept": ""}},
		{raw: `{"gone": null}`},
		{raw: `{"s": "v", "n": 3}`, wantErr: `header "n" is a number, not a string`},
		{raw: `{"b": true}`, wantErr: `header "b" is a boolean, not a string`},
		{raw: `{"o": {"x": "1"}}`, wantErr: `header "o" is an object, not a string`},
		{raw: `{"z": 1, "a": [1]}`, wantErr: `header "a" is an array, not a string`},
		{raw: `["a"]`, wantErr: "headers are not a JSON object"},
		{raw: `null`, wantErr: "headers are not a JSON object"},
		{raw: `{"a": "b"`, wantErr: "headers are not a JSON object"},
		{raw: "{\"a\": \"\xff\"}", wantErr: "headers are not valid UTF-8"},
		{raw: `{"` + strings.Repeat("é", 40) + `": 1}`, wantErr: `header "` + strings.Repeat("é", 32) + `"... is a number`},
	} {
		got, err := DecodeHeaders([]byte(tc.raw))
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, tc.raw)
			require.Nil(t, got)
			continue
		}
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.want, got, tc.raw)
	}
}

func TestDisplayHeadersShowsEveryValue(t *testing.T) {
	got := DisplayHeaders([]byte(`{"n": 3, "b": true, "o": {"x": 1}, "s": "v", "z": null}`))
	require.Equal(t, map[string]string{"n": "3", "b": "true", "o": `{"x": 1}`, "s": "v", "z": "null"}, got)
	require.Nil(t, DisplayHeaders([]byte(`not json`)))
}

func TestAgeSaturates(t *testing.T) {
	require.Equal(t, 1500*time.Millisecond, Age(1.5, time.Second))
	require.Equal(t, 3*time.Microsecond, Age(3, time.Microsecond))
	require.Zero(t, Age(-1, time.Second), "a row dated in the future is not pending for a negative time")
	require.Zero(t, Age(math.NaN(), time.Second))
	require.Equal(t, time.Duration(math.MaxInt64), Age(math.Inf(1), time.Second), "created at -infinity")
	require.Equal(t, time.Duration(math.MaxInt64), Age(9.3e18, time.Microsecond), "past what a Duration holds")
	require.Equal(t, time.Duration(math.MaxInt64), Age(float64(math.MaxInt64)/1e9, time.Second))
}

func TestSelectChecksTheFilter(t *testing.T) {
	s, err := Select(heraldadmin.EventFilter{IDs: []string{"0190F1A2-0000-7000-8000-000000000001"}})
	require.NoError(t, err)
	require.Equal(t, heraldadmin.StateDead, s.State, "dead by default")
	require.Equal(t, []string{"0190f1a2-0000-7000-8000-000000000001"}, s.IDs)
	require.Equal(t, 100, s.Limit)
	for _, f := range []heraldadmin.EventFilter{
		{}, {Topic: "a", All: true}, {IDs: []string{"nope"}}, {All: true, State: "gone"},
	} {
		_, err := Select(f)
		require.Error(t, err, "%+v", f)
	}
}
