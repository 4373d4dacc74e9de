// Package textsafe makes text read from an outbox row safe to show to an
// operator, on a terminal or a web page: rows may be written by any
// program, so topics, keys, headers and payloads may hold control
// characters, bidirectional overrides or broken UTF-8.
package textsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Line makes s safe to show on one line: control and bidirectional-override
// characters and broken UTF-8 become visible escapes (\x1b, \u202e).
func Line(s string) string { return escape(s, false) }

// Text is Line keeping line breaks and tabs.
func Text(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r < 0x80 && (r < ' ' || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// Truncate cuts s to n runes, the last one an ellipsis, when it is longer.
func Truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// Plural counts a noun: "1 event", "2 events".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
