package textsafe_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/textsafe"
)

func TestEscapes(t *testing.T) {
	require.Equal(t, `a\x1b[31mb\u202ec\xff`, textsafe.Line("a\x1b[31mb\u202ec\xff"))
	require.Equal(t, `line\x0anext`, textsafe.Line("line\nnext"))
	require.Equal(t, "line\nnext\tx\\x00", textsafe.Text("line\nnext\tx\x00"))
	require.Equal(t, "héllo", textsafe.Line("héllo"), "printable text is left alone")
}

func TestTruncateAndPlural(t *testing.T) {
	require.Equal(t, "abc", textsafe.Truncate("abc", 3))
	require.Equal(t, "ab…", textsafe.Truncate("abcd", 3))
	require.Equal(t, "é…", textsafe.Truncate("éééé", 2), "runes, not bytes")
	require.Equal(t, "1 event", textsafe.Plural(1, "event"))
	require.Equal(t, "0 events", textsafe.Plural(0, "event"))
}
