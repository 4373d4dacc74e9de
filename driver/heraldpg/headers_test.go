package heraldpg

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The headers column holds whatever other programs wrote. Decoding must
// never panic, and an object of strings must come back as it went in.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":"b"}`, `{"n":3,"o":{"x":[1]}}`, `[]`, `null`, `{"a":"\u0000"}`, ``, `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got := decodeHeaders(raw)
		var want map[string]string
		if json.Unmarshal(raw, &want) == nil && len(want) > 0 {
			require.Equal(t, want, got)
		}
	})
}

func TestDecodeHeadersKeepsNonStringValuesAsJSON(t *testing.T) {
	got := decodeHeaders([]byte(`{"n": 3, "b": true, "o": {"x": 1}, "s": "v"}`))
	require.Equal(t, map[string]string{"n": "3", "b": "true", "o": `{"x": 1}`, "s": "v"}, got)
	require.Nil(t, decodeHeaders([]byte(`not json`)))
}
