package sqlstore

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldadmin"
)

// The headers column holds whatever other programs wrote. Decoding must
// never panic, and an object of strings must come back as it went in.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"n":3,"o":{"x":[1]}}`, `[]`, `null`, `{"a":"\u0000"}`, ``, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := DecodeHeaders(raw)
		var want map[string]string
		if json.Unmarshal(raw, &want) == nil && len(want) > 0 {
			require.Equal(t, want, got)
		}
	})
}

func TestDecodeHeadersKeepsNonStringValuesAsJSON(t *testing.T) {
	got := DecodeHeaders([]byte(`{"n": 3, "b": true, "o": {"x": 1}, "s": "v"}`))
	require.Equal(t, map[string]string{"n": "3", "b": "true", "o": `{"x": 1}`, "s": "v"}, got)
	require.Nil(t, DecodeHeaders([]byte(`not json`)))
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
