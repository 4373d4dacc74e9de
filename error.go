package herald

import (
	"errors"
	"regexp"
	"strings"
)

// ErrRelayStopped is returned by Relay.Start after the relay was stopped.
var ErrRelayStopped = errors.New("herald: relay stopped")

// MaxLastErrorLen caps the error text kept on a row.
const MaxLastErrorLen = 2048

var (
	// scheme://user:password@host
	urlPassword = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*):[^@/\s]*@`)
	// password=secret, token: secret, "secret":"..." and the like
	keyValueSecret = regexp.MustCompile(`(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|authorization)["']?\s*[:=]\s*["']?)([^\s"'&,;]+)`)
)

// Scrub removes what looks like a credential from s (the password of a URL,
// password=..., token: ...) and caps its length. The relay runs every
// publish error through it before keeping it as a row's last_error or
// logging it.
func Scrub(s string) string {
	s = urlPassword.ReplaceAllString(s, "$1:xxxxx@")
	s = keyValueSecret.ReplaceAllString(s, "${1}xxxxx")
	if len(s) > MaxLastErrorLen {
		s = s[:MaxLastErrorLen]
	}
	// The text is stored in a text column: no NUL, no broken UTF-8.
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
}
