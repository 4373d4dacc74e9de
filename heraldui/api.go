package heraldui

import (
	"encoding/json"
	"mime"
	"net/http"
	"strings"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// wantsJSON reports whether the request asks for the page's JSON: an
// Accept header that names application/json. Every page answers the same
// URL either way, under the same access rules.
func wantsJSON(r *http.Request) bool {
	for part := range strings.SplitSeq(r.Header.Get("Accept"), ",") {
		if t, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && t == "application/json" {
			return true
		}
	}
	return false
}

// writeJSON writes v as the JSON answer of a page.
func (h *handler) writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.cfg.Logger.Error("heraldui: encoding JSON", "error", err)
		http.Error(w, `{"error":"internal error encoding the answer"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// errorJSON is the JSON answer of a refusal or a failure.
type errorJSON struct {
	Status int    `json:"status"`
	Error  string `json:"error"`
}

// eventJSON is an event as the JSON API shows it: what its page shows,
// with the same escaping, scrubbing and hidden headers.
type eventJSON struct {
	ID            string `json:"id"`
	Seq           int64  `json:"seq"`
	Topic         string `json:"topic"`
	Key           string `json:"key"`
	Type          string `json:"type"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	EventVersion  int    `json:"event_version"`
	// AggregateVersion is left out when the event has none.
	AggregateVersion int64             `json:"aggregate_version,omitempty"`
	State            string            `json:"state"`
	Attempts         int               `json:"attempts"`
	Parked           bool              `json:"parked"`
	CreatedAt        string            `json:"created_at"`
	AvailableAt      string            `json:"available_at"`
	PublishedAt      string            `json:"published_at,omitempty"`
	DeadAt           string            `json:"dead_at,omitempty"`
	LastError        string            `json:"last_error"`
	Headers          map[string]string `json:"headers,omitempty"` // hidden values are "(hidden)"
	Payload          *preview          `json:"payload,omitempty"` // on the event's own page only
}

func eventOf(row heraldadmin.EventRow, withBody bool) eventJSON {
	e := eventJSON{ID: row.ID, Seq: row.Seq, Topic: clean(row.Topic), Key: clean(row.Key), Type: clean(row.Type),
		AggregateType: clean(row.AggregateType), AggregateID: clean(row.AggregateID),
		EventVersion: row.EventVersion, AggregateVersion: row.AggregateVersion, State: string(row.State), Attempts: row.Attempt,
		Parked: row.Parked, CreatedAt: when(row.CreatedAt), AvailableAt: when(row.AvailableAt), LastError: clean(herald.Scrub(row.LastError))}
	if row.PublishedAt != nil {
		e.PublishedAt = when(*row.PublishedAt)
	}
	if row.DeadAt != nil {
		e.DeadAt = when(*row.DeadAt)
	}
	if withBody {
		e.Headers = map[string]string{}
		for _, hd := range headersOf(row.Headers) {
			e.Headers[clean(hd.Name)] = clean(hd.Value)
			if hd.Hidden {
				e.Headers[clean(hd.Name)] = "(hidden)"
			}
		}
		p := newPreview(row.Payload)
		e.Payload = &p
	}
	return e
}

func eventsOf(rows []heraldadmin.EventRow) []eventJSON {
	out := make([]eventJSON, 0, len(rows))
	for _, r := range rows {
		out = append(out, eventOf(r, false))
	}
	return out
}
