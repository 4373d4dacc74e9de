package heraldui

import (
	"fmt"
	"log/slog"
	"net/http"
	"regexp"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// groupIDPattern is what groupID returns.
var groupIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

type retryingPage struct {
	Retrying retryingView    `json:"retrying"`
	Group    *retryGroupView `json:"group,omitempty"` // the group asked for
	Events   []retryEvent    `json:"events"`          // its events, next attempt first
	More     bool            `json:"more_events"`
}

type retryEvent struct {
	ID          string `json:"id"`
	Topic       string `json:"topic"`
	Key         string `json:"key"`
	Type        string `json:"type"`
	Attempts    int    `json:"attempts"`
	NextAttempt string `json:"next_attempt"`
	AvailableAt string `json:"available_at"`
	LastError   string `json:"last_error"`   // as shown (shownError)
	StoredError string `json:"stored_error"` // as stored (storedError)
}

// retrying lists the retry groups, and with ?group= the events of one.
func (h *handler) retrying(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.cfg.Admin.(heraldadmin.Retrying)
	if !ok {
		h.fail(w, r, http.StatusNotFound, "This store does not list retrying events.")
		return
	}
	id := r.URL.Query().Get("group")
	if id != "" && !groupIDPattern.MatchString(id) {
		h.fail(w, r, http.StatusBadRequest, "%q is not a retry group.", clean(truncate(id, 40)))
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	groups, err := rt.RetryGroups(ctx, maxRetryGroups)
	if err != nil {
		h.storeFailed(w, r, "grouping the retrying events", err)
		return
	}
	now := h.now()
	v := retryingPage{Retrying: retryingOf(groups, maxRetryGroups, now)}
	if id != "" {
		var g *heraldadmin.RetryGroup
		for i := range groups {
			if groupID(groups[i].LastError) == id {
				g = &groups[i]
			}
		}
		if g == nil {
			h.fail(w, r, http.StatusNotFound, "No retrying event has that error any more: it may have been published, or failed otherwise since.")
			return
		}
		gv := retryingOf([]heraldadmin.RetryGroup{*g}, 1, now).Groups[0]
		v.Group = &gv
		rows, err := rt.ListRetrying(ctx, heraldadmin.RetryFilter{LastError: g.LastError, Limit: defaultListLimit + 1})
		if err != nil {
			h.storeFailed(w, r, "listing retrying events", err)
			return
		}
		v.More = len(rows) > defaultListLimit
		for _, row := range rows[:min(len(rows), defaultListLimit)] {
			v.Events = append(v.Events, retryEvent{ID: row.ID, Topic: clean(row.Topic), Key: clean(row.Key), Type: clean(row.Type),
				Attempts: row.Attempt, NextAttempt: until(row.AvailableAt, now), AvailableAt: when(row.AvailableAt),
				LastError: shownError(row.LastError), StoredError: storedError(row.LastError)})
		}
	}
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, v)
		return
	}
	h.render(w, r, http.StatusOK, "retrying", "Retrying", v)
}

// retryNow makes the events of a retry group available now. It is safe
// for the order of every key: the later events of a key wait behind its
// first ready event, whenever that one is tried. It needs the token, the
// session's CSRF token and confirm=yes, and is written to the audit log.
func (h *handler) retryNow(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.cfg.Admin.(heraldadmin.Retrying)
	if !ok {
		h.fail(w, r, http.StatusNotFound, "This store does not list retrying events.")
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
	if r.PostForm.Get("confirm") != "yes" {
		h.fail(w, r, http.StatusBadRequest, "The action was not confirmed.")
		return
	}
	id := r.PostForm.Get("group")
	if !groupIDPattern.MatchString(id) {
		h.fail(w, r, http.StatusBadRequest, "%q is not a retry group.", clean(truncate(id, 40)))
		return
	}
	method := acc.method()
	attrs := []slog.Attr{slog.String("method", method), slog.String("group", id)}
	ctx, cancel := storeCtx(r)
	defer cancel()
	g, found, err := lookupGroup(ctx, rt, id)
	if err != nil {
		h.storeFailed(w, r, "grouping the retrying events", err)
		return
	}
	if !found {
		h.audit(r, "retry_now", append(attrs, slog.Int("changed", 0), slog.String("outcome", "no such group"))...)
		h.fail(w, r, http.StatusNotFound, "No retrying event has that error any more: it may have been published, or failed otherwise since.")
		return
	}
	attrs = append(attrs, slog.String("last_error", truncate(herald.Scrub(g.LastError), 300)))
	n, err := rt.RetryNow(ctx, heraldadmin.RetryFilter{LastError: g.LastError})
	if err != nil {
		h.audit(r, "retry_now", append(attrs, slog.Int("changed", 0), slog.String("outcome", "failed"),
			slog.String("error", herald.Scrub(err.Error())))...)
		h.storeFailed(w, r, "retrying events now", err)
		return
	}
	h.audit(r, "retry_now", append(attrs, slog.Int("changed", n), slog.String("outcome", "done"))...)
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, map[string]any{"action": "retry_now", "group": id, "changed": n})
		return
	}
	http.Redirect(w, r, fmt.Sprintf("%s/?retried=%d#retrying-section", h.cfg.Prefix, n), http.StatusSeeOther)
}
