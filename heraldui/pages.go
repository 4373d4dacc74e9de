package heraldui

import (
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

type deadView struct {
	Topic, ID string // the search, as asked
	Limit     int
	Rows      []heraldadmin.EventRow
	More      bool
	MoreLimit int      // the limit of the "show more" link; 0 at the maximum
	Topics    []string // topics with dead events, to pick from
	// Other is the event searched by id when it is not dead.
	Other *heraldadmin.EventRow
	// Unknown is set when no event has the id searched.
	Unknown bool
}

func (h *handler) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := deadView{Topic: q.Get("topic"), ID: strings.TrimSpace(q.Get("id")), Limit: defaultListLimit}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			h.fail(w, r, http.StatusBadRequest, "limit must be a number from 1 to %d, not %q.", maxListLimit, s)
			return
		}
		v.Limit = n
	}
	f := heraldadmin.EventFilter{All: true, State: heraldadmin.StateDead, Limit: v.Limit + 1} // one more tells whether there are more
	switch {
	case v.ID != "" && v.Topic != "":
		h.fail(w, r, http.StatusBadRequest, "Search by topic or by event id, not both.")
		return
	case v.ID != "":
		id, err := parseID(v.ID)
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, "%s", err)
			return
		}
		f.All, f.IDs = false, []string{id}
	case v.Topic != "":
		if err := checkTopic(v.Topic); err != nil {
			h.fail(w, r, http.StatusBadRequest, "%s", err)
			return
		}
		f.All, f.Topic = false, v.Topic
	}

	ctx, cancel := storeCtx(r)
	defer cancel()
	rows, err := h.cfg.Admin.ListEvents(ctx, f)
	if err != nil {
		h.storeFailed(w, r, "listing dead events", err)
		return
	}
	v.More = len(rows) > v.Limit
	v.Rows = rows[:min(len(rows), v.Limit)]
	if v.More && v.Limit < maxListLimit {
		v.MoreLimit = min(v.Limit*2, maxListLimit)
	}
	if len(f.IDs) == 1 && len(rows) == 0 {
		row, err := h.cfg.Admin.GetEvent(ctx, f.IDs[0])
		switch {
		case errors.Is(err, heraldadmin.ErrNotFound):
			v.Unknown = true
		case err != nil:
			h.storeFailed(w, r, "reading the event", err)
			return
		default:
			v.Other = &row
		}
	}
	backlog, err := h.cfg.Admin.Backlog(ctx)
	if err != nil {
		h.storeFailed(w, r, "reading the backlog", err)
		return
	}
	for _, b := range backlog {
		if b.Dead > 0 {
			v.Topics = append(v.Topics, b.Topic)
		}
	}
	slices.Sort(v.Topics)
	if wantsJSON(r) {
		out := map[string]any{"events": eventsOf(v.Rows), "more": v.More, "topics": v.Topics}
		if v.Other != nil {
			out["other"] = eventOf(*v.Other, false)
		}
		h.writeJSON(w, http.StatusOK, out)
		return
	}
	h.render(w, r, http.StatusOK, "dead", "Dead letters", v)
}

type eventView struct {
	Row       heraldadmin.EventRow
	Headers   []header
	Payload   preview
	LastError string // as shown (shownError)
	Stored    string // as stored, when that differs (storedError)
}

func (h *handler) event(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "%s", err)
		return
	}
	ctx, cancel := storeCtx(r)
	defer cancel()
	row, err := h.cfg.Admin.GetEvent(ctx, id)
	if errors.Is(err, heraldadmin.ErrNotFound) {
		h.fail(w, r, http.StatusNotFound, "No event has the id %s: it may have been discarded, or published and then deleted by retention.", id)
		return
	}
	if err != nil {
		h.storeFailed(w, r, "reading the event", err)
		return
	}
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, eventOf(row, true))
		return
	}
	v := eventView{Row: row, Headers: headersOf(row.Headers), Payload: newPreview(row.Payload), LastError: shownError(row.LastError)}
	if stored := storedError(row.LastError); stored != v.LastError {
		v.Stored = stored
	}
	h.render(w, r, http.StatusOK, "event", "Event "+id, v)
}

// selection is what an action applies to: the dead events with IDs, or
// every dead event of Topic.
type selection struct {
	Action string // "requeue" or "discard"
	IDs    []string
	Topic  string
	Resume bool // discard: also the events that park their key
}

func (s selection) filter() heraldadmin.EventFilter {
	return heraldadmin.EventFilter{IDs: s.IDs, Topic: s.Topic, State: heraldadmin.StateDead, Resume: s.Resume}
}

// QueryFor returns the selection as the query of the confirmation page of
// action.
func (s selection) QueryFor(action string) template.URL {
	q := url.Values{"action": {action}}
	if s.Topic != "" {
		q.Set("topic", s.Topic)
	}
	q["id"] = s.IDs
	return template.URL(q.Encode()) // encoded: nothing left to escape
}

func parseSelection(action string, form url.Values) (selection, error) {
	s := selection{Action: action, Topic: form.Get("topic"), Resume: form.Get("resume") == "1"}
	if action != "requeue" && action != "discard" {
		return s, fmt.Errorf("the action must be requeue or discard, not %q", action)
	}
	ids := form["id"]
	if len(ids) > maxSelectedIDs {
		return s, fmt.Errorf("%d events are selected; select at most %d at once, or select by topic", len(ids), maxSelectedIDs)
	}
	for _, raw := range ids {
		id, err := parseID(raw)
		if err != nil {
			return s, err
		}
		if !slices.Contains(s.IDs, id) {
			s.IDs = append(s.IDs, id)
		}
	}
	switch {
	case len(s.IDs) > 0 && s.Topic != "":
		return s, errors.New("select events by ids or by topic, not both")
	case len(s.IDs) == 0 && s.Topic == "":
		return s, errors.New("no event is selected: tick some events, or pick a topic")
	case s.Topic != "":
		if err := checkTopic(s.Topic); err != nil {
			return s, err
		}
	}
	return s, nil
}

type confirmView struct {
	Sel selection
	// Count is how many dead events the selection holds now.
	Count int
	// Events are the selected dead events, when selected by id.
	Events []heraldadmin.EventRow
	// NotDead are the ids selected that are not dead events.
	NotDead []string
	// Parked are the keys that events of the selection park; ParkedCount
	// how many there are in all (Parked may show fewer).
	Parked      []heraldadmin.BlockedKey
	ParkedCount int
	// AsksResume says the discard needs the operator's resume choice: a
	// parked key of the selection has events waiting behind it, or may
	// have (Parked is not the whole list). A key with nothing waiting is
	// discarded and unparked alike, without asking.
	AsksResume bool
}

func (h *handler) confirm(w http.ResponseWriter, r *http.Request) {
	acc, _ := h.access(r)
	switch {
	case acc.ReadOnly:
		h.fail(w, r, http.StatusForbidden, readOnlyMessage)
		return
	case !acc.LoggedIn:
		h.fail(w, r, http.StatusUnauthorized, "Log in with the admin token first.")
		return
	}
	sel, err := parseSelection(r.URL.Query().Get("action"), r.URL.Query())
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "%s.", err)
		return
	}
	sel.Resume = false // the confirmation page asks
	ctx, cancel := storeCtx(r)
	defer cancel()
	v := confirmView{Sel: sel}
	var parking map[string]bool // ids of the selected events that park their key
	if len(sel.IDs) > 0 {
		rows, err := h.cfg.Admin.ListEvents(ctx, heraldadmin.EventFilter{IDs: sel.IDs, State: heraldadmin.StateDead, Limit: len(sel.IDs)})
		if err != nil {
			h.storeFailed(w, r, "reading the selected events", err)
			return
		}
		v.Events, v.Count = rows, len(rows)
		parking = map[string]bool{}
		dead := map[string]bool{}
		for _, row := range rows {
			dead[row.ID] = true
			if row.Parked {
				parking[row.ID] = true
			}
		}
		for _, id := range sel.IDs {
			if !dead[id] {
				v.NotDead = append(v.NotDead, id)
			}
		}
		v.ParkedCount = len(parking)
	} else {
		backlog, err := h.cfg.Admin.Backlog(ctx)
		if err != nil {
			h.storeFailed(w, r, "reading the backlog", err)
			return
		}
		for _, b := range backlog {
			if b.Topic == sel.Topic {
				v.Count, v.ParkedCount = int(b.Dead), int(b.ParkedKeys)
			}
		}
	}
	if sel.Action == "discard" && v.ParkedCount > 0 {
		keys, err := h.cfg.Admin.BlockedKeys(ctx, maxListLimit)
		if err != nil {
			h.storeFailed(w, r, "listing parked keys", err)
			return
		}
		for _, k := range keys {
			if (parking != nil && parking[k.EventID]) || (parking == nil && k.Topic == sel.Topic) {
				v.Parked = append(v.Parked, k)
				v.AsksResume = v.AsksResume || k.Waiting > 0
			}
		}
		v.AsksResume = v.AsksResume || len(keys) >= maxListLimit
	}
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, map[string]any{"action": sel.Action, "count": v.Count, "events": eventsOf(v.Events),
			"not_dead": v.NotDead, "parked_keys": v.ParkedCount})
		return
	}
	title := "Confirm " + sel.Action
	h.render(w, r, http.StatusOK, "confirm", title, v)
}

type resultView struct {
	Sel     selection
	Changed int
	// NotDead counts the ids given that were not dead events.
	NotDead int
}

type parkedView struct {
	Sel  selection
	Keys []heraldadmin.BlockedKey
}

func (h *handler) action(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if action != "requeue" && action != "discard" {
		h.fail(w, r, http.StatusNotFound, "There is no action %q: the actions are requeue and discard.", action)
		return
	}
	if err := r.ParseForm(); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.fail(w, r, http.StatusRequestEntityTooLarge, "The form is larger than %d bytes: select fewer events, or select by topic.", maxFormBytes)
			return
		}
		h.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	acc, ok := h.authorizeAction(w, r)
	if !ok {
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		h.fail(w, r, http.StatusBadRequest, "The action was not confirmed: confirm it on its confirmation page.")
		return
	}
	// Only the body counts: a selection smuggled into the URL's query
	// would change rows the confirmation page never showed.
	sel, err := parseSelection(action, r.PostForm)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, "%s.", err)
		return
	}
	method := acc.method()
	attrs := []slog.Attr{slog.String("method", method), slog.Any("ids", sel.IDs), slog.String("topic", sel.Topic)}
	if action == "discard" {
		attrs = append(attrs, slog.Bool("resume", sel.Resume))
	}

	ctx, cancel := storeCtx(r)
	defer cancel()
	var n int
	if action == "requeue" {
		n, err = h.cfg.Admin.RequeueDead(ctx, sel.filter())
	} else {
		n, err = h.cfg.Admin.DiscardDead(ctx, sel.filter())
	}
	var parked *heraldadmin.ParkedError
	switch {
	case errors.As(err, &parked):
		h.audit(r, action, append(attrs, slog.Int("changed", 0), slog.String("outcome", "refused: parks a key"))...)
		if wantsJSON(r) {
			h.writeJSON(w, http.StatusConflict, errorJSON{Status: http.StatusConflict, Error: herald.Scrub(parked.Error())})
			return
		}
		h.render(w, r, http.StatusConflict, "parked", "Nothing was discarded", parkedView{Sel: sel, Keys: parked.Keys})
		return
	case err != nil:
		h.audit(r, action, append(attrs, slog.Int("changed", 0), slog.String("outcome", "failed"),
			slog.String("error", herald.Scrub(err.Error())))...)
		h.storeFailed(w, r, actionDoing(action), err)
		return
	}
	h.audit(r, action, append(attrs, slog.Int("changed", n), slog.String("outcome", "done"))...)
	v := resultView{Sel: sel, Changed: n}
	if len(sel.IDs) > n {
		v.NotDead = len(sel.IDs) - n
	}
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, map[string]any{"action": action, "changed": n, "not_dead": v.NotDead})
		return
	}
	h.render(w, r, http.StatusOK, "result", actionDone(action), v)
}

func actionDoing(action string) string {
	if action == "requeue" {
		return "requeueing dead events"
	}
	return "discarding dead events"
}

func actionDone(action string) string {
	if action == "requeue" {
		return "Requeued"
	}
	return "Discarded"
}

// audit writes one line of the audit log.
func (h *handler) audit(r *http.Request, action string, attrs ...slog.Attr) {
	attrs = append([]slog.Attr{slog.String("action", action), slog.String("remote_addr", r.RemoteAddr)}, attrs...)
	h.cfg.Audit.LogAttrs(r.Context(), slog.LevelInfo, "admin action", attrs...)
}

func parseID(raw string) (string, error) {
	u, err := uuid.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not an event id (a UUID such as 0192f7c4-8a5e-7c3b-9f1d-2b6a4c8e0d17)", clean(truncate(raw, 80)))
	}
	return u.String(), nil
}

func checkTopic(t string) error {
	if len(t) > herald.MaxTopicLen {
		return fmt.Errorf("a topic is at most %d bytes long", herald.MaxTopicLen)
	}
	for _, c := range t {
		if c <= ' ' || c == 0x7f {
			return fmt.Errorf("%q is not a topic: topics have no spaces or control characters", clean(truncate(t, 80)))
		}
	}
	return nil
}
