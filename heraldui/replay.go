package heraldui

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// ReplayRequest is a replay asked from the page.
type ReplayRequest struct {
	Filter heraldadmin.PublishedFilter
	// DryRun counts the events, by destination, and publishes nothing.
	DryRun bool
	// Rate is the most events a second to publish.
	Rate int
	// NewIDs gives every replayed event a new id, so that consumers' and
	// brokers' deduplication (JetStream's, within its window) lets it
	// through.
	NewIDs bool
	// Max is the most events the replay may publish: a replay that would
	// publish more stops before the first one. The dry run counts at most
	// Max+1.
	Max int
}

// ReplayResult is what a replay did, or would do.
type ReplayResult struct {
	Events        int            `json:"events"`
	ByDestination map[string]int `json:"by_destination"`
	// Stopped says why a replay stopped before its last event: a
	// destination that did not confirm one, and where to resume with
	// `herald replay --after`.
	Stopped string `json:"stopped,omitempty"`
}

// Bounds of a replay from the page: more goes through `herald replay`,
// which can resume.
const (
	maxPageReplay     = 10000
	defaultReplayRate = 100
	maxReplayRate     = 1000
)

// replayForm is the replay form, as typed.
type replayForm struct {
	Topic, Key, Type, Since, Until string
	AnyKey                         bool // no key condition (the key field is ignored)
	NewIDs                         bool
	Rate                           int
}

func (f replayForm) values() url.Values {
	v := url.Values{"topic": {f.Topic}, "type": {f.Type}, "since": {f.Since}, "until": {f.Until}, "rate": {strconv.Itoa(f.Rate)}}
	if f.NewIDs {
		v.Set("new_ids", "1")
	}
	if !f.AnyKey {
		v.Set("key", f.Key)
		v.Set("by_key", "1")
	}
	return v
}

// parseReplayForm checks the form and returns the selection it makes.
func parseReplayForm(form url.Values, now time.Time) (replayForm, heraldadmin.PublishedFilter, error) {
	f := replayForm{Topic: strings.TrimSpace(form.Get("topic")), Key: form.Get("key"), Type: strings.TrimSpace(form.Get("type")),
		Since: strings.TrimSpace(form.Get("since")), Until: strings.TrimSpace(form.Get("until")), AnyKey: form.Get("by_key") != "1",
		NewIDs: form.Get("new_ids") == "1", Rate: defaultReplayRate}
	pf := heraldadmin.PublishedFilter{Topic: f.Topic, Type: f.Type}
	if s := strings.TrimSpace(form.Get("rate")); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxReplayRate {
			return f, pf, fmt.Errorf("the rate must be a number of events a second from 1 to %d, not %q", maxReplayRate, clean(truncate(s, 40)))
		}
		f.Rate = n
	}
	if f.Topic != "" {
		if err := checkTopic(f.Topic); err != nil {
			return f, pf, err
		}
	}
	if len(f.Type) > 255 || len(f.Key) > 1024 {
		return f, pf, errors.New("the type is at most 255 bytes and the key at most 1024")
	}
	if !f.AnyKey {
		pf.Key = &f.Key
	}
	var err error
	if pf.Since, err = parseWhen("since", f.Since, now); err != nil {
		return f, pf, err
	}
	if pf.Until, err = parseWhen("until", f.Until, now); err != nil {
		return f, pf, err
	}
	switch {
	case !pf.Since.IsZero() && !pf.Until.IsZero() && !pf.Since.Before(pf.Until):
		return f, pf, errors.New("since must be before until: the time range is empty")
	case pf.Topic == "" && pf.Key == nil && pf.Type == "" && pf.Since.IsZero() && pf.Until.IsZero():
		return f, pf, errors.New("select the events to replay: a topic, a key, a type or a time range")
	}
	return f, pf, nil
}

// parseWhen reads a time as RFC 3339, as the form's date and time (UTC),
// or as a duration before now, such as 2h.
func parseWhen(label, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s: %q is neither a time such as 2026-11-24T09:30:00Z nor a duration ago such as 2h",
		label, clean(truncate(s, 60)))
}

type replayView struct {
	Form replayForm
	// Counted is set on the confirmation step: the dry run's result.
	Counted *ReplayResult
	TooMany bool // more than maxPageReplay: the page refuses
	Max     int
	Query   string // the form as a query, for "change the selection"
	Done    *ReplayResult
}

func (v replayView) Destinations() []string {
	r := v.Counted
	if r == nil {
		r = v.Done
	}
	if r == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(r.ByDestination))
}

func (h *handler) replayPage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Replay == nil {
		h.fail(w, r, http.StatusNotFound, "Replay is not available here: the page is not served by a running relay.")
		return
	}
	f, _, _ := parseReplayForm(r.URL.Query(), h.now())
	if r.URL.Query().Get("rate") == "" {
		f.Rate = defaultReplayRate
	}
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, map[string]any{"max_events": maxPageReplay, "default_rate": defaultReplayRate, "max_rate": maxReplayRate})
		return
	}
	h.render(w, r, http.StatusOK, "replay", "Replay", replayView{Form: f, Max: maxPageReplay})
}

// replayAction is the replay form's two posts: count (a dry run, whose
// page asks for confirmation) and run (confirmed). Both need the token and
// the session's CSRF token; both are written to the audit log.
func (h *handler) replayAction(w http.ResponseWriter, r *http.Request) {
	step := r.PathValue("step")
	if h.cfg.Replay == nil || (step != "count" && step != "run") {
		h.fail(w, r, http.StatusNotFound, "There is no page at %s.", r.URL.Path)
		return
	}
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	acc, ok := h.authorizeAction(w, r)
	if !ok {
		return
	}
	form, filter, err := parseReplayForm(r.PostForm, h.now())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "%s.", err)
		return
	}
	if step == "run" && r.PostForm.Get("confirm") != "yes" {
		h.fail(w, r, http.StatusBadRequest, "The replay was not confirmed: count the events first, then confirm.")
		return
	}
	if !h.replaying.CompareAndSwap(false, true) {
		h.fail(w, r, http.StatusConflict, "Another replay from this page is running: wait for it to end.")
		return
	}
	defer h.replaying.Store(false)

	method := acc.method()
	attrs := []slog.Attr{slog.String("method", method), slog.String("topic", form.Topic), slog.String("type", form.Type),
		slog.String("since", form.Since), slog.String("until", form.Until), slog.Int("rate", form.Rate), slog.Bool("new_ids", form.NewIDs)}
	if !form.AnyKey {
		attrs = append(attrs, slog.String("key", form.Key))
	}
	req := ReplayRequest{Filter: filter, DryRun: step == "count", Rate: form.Rate, NewIDs: form.NewIDs, Max: maxPageReplay}
	res, err := h.cfg.Replay(r.Context(), req)
	if err != nil {
		h.audit(r, "replay_"+step, append(attrs, slog.String("outcome", "failed"), slog.String("error", herald.Scrub(err.Error())))...)
		h.storeFailed(w, r, "replaying", err)
		return
	}
	v := replayView{Form: form, Max: maxPageReplay, Query: form.values().Encode()}
	if step == "count" {
		v.Counted, v.TooMany = &res, res.Events > maxPageReplay
		h.audit(r, "replay_count", append(attrs, slog.Int("events", res.Events), slog.String("outcome", "counted"))...)
		if wantsJSON(r) {
			h.writeJSON(w, http.StatusOK, map[string]any{"events": res.Events, "by_destination": res.ByDestination,
				"too_many": v.TooMany, "max_events": maxPageReplay})
			return
		}
		h.render(w, r, http.StatusOK, "replay", "Confirm the replay", v)
		return
	}
	outcome := "done"
	if res.Stopped != "" {
		outcome = "stopped"
	}
	h.audit(r, "replay", append(attrs, slog.Int("events", res.Events), slog.String("outcome", outcome))...)
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, res)
		return
	}
	v.Done = &res
	h.render(w, r, http.StatusOK, "replay", "Replayed", v)
}
