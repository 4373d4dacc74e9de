package adminui

import (
	"encoding/hex"
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
	"clean":  clean,
	"short":  func(s string, n int) string { return truncate(clean(s), n) },
	"age":    age,
	"when":   when,
	"whenp":  whenp,
	"plural": plural,
	"scrub":  herald.Scrub,
}

// preview is how the event page shows a payload.
type preview struct {
	Size    int
	Binary  bool   // not UTF-8: Text is a hex dump
	Text    string // control characters made visible
	Omitted int    // bytes not shown
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

// rateView draws the publish rate as bars of an SVG of width rateWidth.
type rateView struct {
	Bars    []rateBar
	Total   int64
	Last    int64 // the last minute's count
	Max     int64
	Minutes int
	Width   int
	Height  int
}

type rateBar struct {
	X, Y, W, H int
	Label      string
}

const (
	rateWidth  = 600
	rateHeight = 120
)

func newRateView(points []RatePoint) *rateView {
	v := &rateView{Minutes: len(points), Width: rateWidth, Height: rateHeight}
	for _, p := range points {
		v.Total += p.Published
		v.Max = max(v.Max, p.Published)
	}
	if len(points) == 0 {
		return v
	}
	v.Last = points[len(points)-1].Published
	slot := rateWidth / len(points)
	for i, p := range points {
		h := 0
		if v.Max > 0 {
			h = int(p.Published * (rateHeight - 2) / v.Max)
		}
		if p.Published > 0 {
			h = max(h, 2) // a minute with any event shows
		}
		v.Bars = append(v.Bars, rateBar{
			X: i*slot + 1, Y: rateHeight - h, W: max(slot-2, 1), H: h,
			Label: fmt.Sprintf("%s: %s", p.Minute.UTC().Format("15:04 UTC"), plural(int(p.Published), "event")),
		})
	}
	return v
}

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
