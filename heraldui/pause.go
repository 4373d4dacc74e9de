package heraldui

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// pausesView is the overview's Paused section: the pauses in force with
// the events each holds, and what the pause form offers.
type pausesView struct {
	Held         []heraldadmin.Held
	PausedTopics map[string]bool // topics a pause holds, to mark in the backlog
	Topics       []string        // topics with events, for the form's suggestions
	Destinations []string        // the relay's destinations, likewise
}

// pausesOf reads the pauses in force and counts what each holds.
func (h *handler) pausesOf(r *http.Request, backlog []heraldadmin.TopicBacklog) (pausesView, error) {
	ctx, cancel := storeCtx(r)
	defer cancel()
	pauses, err := h.cfg.Admin.Pauses(ctx)
	if err != nil {
		return pausesView{}, err
	}
	v := pausesView{Held: heraldadmin.HeldBy(pauses, backlog, h.cfg.DestinationOf), PausedTopics: map[string]bool{}}
	for _, held := range v.Held {
		for _, t := range held.Topics {
			v.PausedTopics[t] = true
		}
		if held.Kind == herald.PauseTopic {
			v.PausedTopics[held.Name] = true
		}
	}
	for _, b := range backlog {
		v.Topics = append(v.Topics, b.Topic)
	}
	if h.cfg.Destinations != nil {
		v.Destinations = sortedDestinations(h.cfg.Destinations(), v.Held)
	}
	return v, nil
}

// pauseAction pauses or resumes a topic or a destination, from the
// overview's forms; like requeue and discard it needs the token and the
// session's CSRF token, and is written to the audit log. Both are undone
// by the other, so there is no confirmation step.
func (h *handler) pauseAction(w http.ResponseWriter, r *http.Request) {
	verb := r.PathValue("verb")
	if verb != "pause" && verb != "resume" {
		h.fail(w, r, http.StatusNotFound, "There is no action %q here: pause or resume.", verb)
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
	kind, name, reason := herald.PauseKind(r.PostForm.Get("kind")), strings.TrimSpace(r.PostForm.Get("name")), strings.TrimSpace(r.PostForm.Get("reason"))
	if err := checkPause(kind, name, reason); err != nil {
		h.fail(w, r, http.StatusBadRequest, "%s.", err)
		return
	}
	method := acc.method()
	attrs := []slog.Attr{slog.String("method", method), slog.String("kind", string(kind)), slog.String("name", name)}
	ctx, cancel := storeCtx(r)
	defer cancel()
	var err error
	outcome := "done"
	if verb == "pause" {
		attrs = append(attrs, slog.String("reason", reason))
		err = h.cfg.Admin.Pause(ctx, heraldadmin.PauseParams{Kind: kind, Name: name, Reason: reason, By: "admin page: " + r.RemoteAddr})
	} else {
		var was bool
		if was, err = h.cfg.Admin.Resume(ctx, kind, name); err == nil && !was {
			outcome = "was not paused"
		}
	}
	if err != nil {
		h.audit(r, verb, append(attrs, slog.String("outcome", "failed"), slog.String("error", herald.Scrub(err.Error())))...)
		h.storeFailed(w, r, verb+" "+string(kind)+" "+clean(name), err)
		return
	}
	h.audit(r, verb, append(attrs, slog.String("outcome", outcome))...)
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, map[string]any{"action": verb, "kind": kind, "name": name, "outcome": outcome})
		return
	}
	http.Redirect(w, r, h.cfg.Prefix+"/#paused-section", http.StatusSeeOther)
}

// checkPause checks the pause form: a kind, a name as a topic or a
// destination may be written, a reason of text within bounds.
func checkPause(kind herald.PauseKind, name, reason string) error {
	switch {
	case kind != herald.PauseTopic && kind != herald.PauseDestination:
		return errors.New("pause a topic or a destination")
	case name == "":
		return errors.New("name the " + string(kind) + " to pause or resume")
	case len(name) > heraldadmin.MaxPauseText || len(reason) > heraldadmin.MaxPauseText:
		return errors.New("the name and the reason are at most 1024 bytes each")
	case strings.ContainsFunc(name, unicode.IsControl) || strings.ContainsFunc(reason, unicode.IsControl):
		return errors.New("the name and the reason hold no control characters")
	case kind == herald.PauseTopic:
		return checkTopic(name)
	}
	return nil
}

// sortedDestinations returns names, sorted, without those already paused.
func sortedDestinations(names []string, held []heraldadmin.Held) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.DeleteFunc(slices.Compact(out), func(n string) bool {
		return slices.ContainsFunc(held, func(h heraldadmin.Held) bool { return h.Kind == herald.PauseDestination && h.Name == n })
	})
}
