package heraldui

import (
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"regexp"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/textsafe"
)

// Payload previews, in bytes: enough to recognise an event, small enough
// that a 1 MiB payload does not make a 4 MiB page.
const (
	textPreviewBytes = 8192
	hexPreviewBytes  = 1024
)

var templateFuncs = template.FuncMap{
	"clean":    clean,
	"short":    func(s string, n int) string { return truncate(clean(s), n) },
	"age":      age,
	"when":     when,
	"whenp":    whenp,
	"plural":   plural,
	"scrub":    herald.Scrub,
	"int":      func(n int64) int { return int(n) },
	"truncate": func(s string, n int) string { return truncate(s, n) },
	// dict passes several values to a nested template: key, value, ...
	"dict": func(kv ...any) (map[string]any, error) {
		if len(kv)%2 != 0 {
			return nil, errors.New("dict needs pairs")
		}
		m := make(map[string]any, len(kv)/2)
		for i := 0; i < len(kv); i += 2 {
			k, ok := kv[i].(string)
			if !ok {
				return nil, errors.New("dict keys are strings")
			}
			m[k] = kv[i+1]
		}
		return m, nil
	},
	// shownError and storedError are a stored last error as the page
	// shows it, and whole, for a title or the event page.
	"shownError":  shownError,
	"storedError": storedError,
}

// preview is how the event page shows a payload.
type preview struct {
	Size    int    `json:"size"`
	Binary  bool   `json:"binary"`  // not UTF-8: Text is a hex dump
	Text    string `json:"text"`    // control characters made visible
	Omitted int    `json:"omitted"` // bytes not shown
}

func newPreview(p []byte) preview {
	v := preview{Size: len(p)}
	if utf8.Valid(p) {
		n := len(p)
		if n > textPreviewBytes {
			n = textPreviewBytes
			for n > 0 && !utf8.RuneStart(p[n]) {
				n--
			}
		}
		v.Text, v.Omitted = cleanText(string(p[:n])), len(p)-n
		return v
	}
	n := min(len(p), hexPreviewBytes)
	v.Binary, v.Text, v.Omitted = true, hex.Dump(p[:n]), len(p)-n
	return v
}

// header is one event header as shown.
type header struct {
	Name, Value string
	Hidden      bool // the name suggests a credential: the value is not shown
}

// secretHeader matches header names whose values are not shown.
var secretHeader = regexp.MustCompile(`(?i)auth|cookie|token|secret|passw|pwd|api[-_]?key|signature|credential|session`)

func headersOf(m map[string]string) []header {
	out := make([]header, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if secretHeader.MatchString(name) {
			out = append(out, header{Name: name, Hidden: true})
			continue
		}
		out = append(out, header{Name: name, Value: herald.Scrub(m[name])})
	}
	return out
}

// batchIndex is the "herald: message N: " of a validation error: N is the
// event's place in the batch the relay claimed, which tells an operator
// nothing. Relays no longer store it ("invalid row: topic: ..."), but rows
// already in a database keep the old text. Anchored after the start or a
// ": ", the way the relay wraps it ("permanent: invalid row: herald:
// message 15: topic: ..."), so that a broker's own text is left alone.
var batchIndex = regexp.MustCompile(`(^|: )herald: message \d+: `)

// shownError is a stored last error as the page shows it: scrubbed, on
// one line, without the batch index that older relays wrote into it.
func shownError(stored string) string {
	return clean(batchIndex.ReplaceAllString(herald.Scrub(stored), "$1"))
}

// storedError is a stored last error whole, scrubbed, on one line.
func storedError(stored string) string { return clean(herald.Scrub(stored)) }

// age renders a duration the way an operator reads it: 42s, 3m05s, 2h10m,
// 3d04h.
func age(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return "<1s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func whenp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return when(*t)
}

func plural(n int, noun string) string { return textsafe.Plural(n, noun) }

func truncate(s string, n int) string { return textsafe.Truncate(s, n) }

// clean makes text from a row safe to show on one line (textsafe.Line).
func clean(s string) string { return textsafe.Line(s) }

// cleanText is clean keeping line breaks and tabs.
func cleanText(s string) string { return textsafe.Text(s) }
