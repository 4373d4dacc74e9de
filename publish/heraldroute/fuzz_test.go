package heraldroute

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A route pattern New accepts routes the topics it describes: each *
// replaced by a run of characters without a dot, and a final > by one or
// more tokens. It routes no topic with another number of tokens, unless it
// ends with >.
func FuzzRoutePattern(f *testing.F) {
	for _, p := range []string{
		"orders.*", "orders.>", ">", "*", "*.placed", "ord*", "a.*.c", "**", "a..b", "orders.placed",
		"a.>.b", "orders>", "a>", ">>", "[", "a[b].*", "a?.*", `a\.*`, "", " ", "a/b.*", "é.*",
	} {
		f.Add(p, "eu", "placed")
	}
	f.Add("a*", "/b", "x")
	f.Add("a.*", "b/c", "x")
	f.Fuzz(func(t *testing.T, pattern, fill, rest string) {
		r, err := New(&Config{
			Destinations: []Destination{{Name: "d", Publisher: &sink{}}},
			Routes:       []Route{{Topic: pattern, Destination: "d"}},
		})
		if err != nil {
			require.ErrorContains(t, err, "heraldroute: Config.Routes[0].Topic: ")
			return
		}
		routed := func(topic string) bool {
			_, d, ok := r.route(topic)
			return ok && d != nil
		}
		if strings.ContainsAny(pattern, `?[\`) {
			// path.Match gives these a meaning the package doc does not
			// promise (one character, a class, an escape): the properties
			// below hold for the documented syntax only.
			return
		}
		fill = strings.ReplaceAll(fill, ".", "")
		prefix, tail := strings.CutSuffix(pattern, ">")
		topic := strings.ReplaceAll(prefix, "*", fill)
		if tail {
			topic += "x" + rest
		}
		require.True(t, routed(topic), "%q does not route %q", pattern, topic)
		if tail {
			return
		}
		require.False(t, routed(topic+".x"), "%q routes %q, a token more", pattern, topic+".x")
		require.False(t, routed("x."+topic), "%q routes %q, a token more", pattern, "x."+topic)
		if i := strings.IndexByte(topic, '.'); i >= 0 {
			// A slash is part of a token, not a separator.
			fewer := topic[:i] + "/" + topic[i+1:]
			require.False(t, routed(fewer), "%q routes %q, a token less", pattern, fewer)
		}
	})
}
