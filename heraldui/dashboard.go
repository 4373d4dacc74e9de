package heraldui

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Bounds of the overview.
const (
	retryGroupsShown = 20
	// maxRetryGroups bounds the groups an action looks its group up in.
	maxRetryGroups = 1000
)

// overviewView is the overview, as the page renders it and as its JSON
// API returns it: the page's script refreshes it from the JSON.
type overviewView struct {
	Totals       totalsView        `json:"totals"`
	Outages      []outageView      `json:"outages"` // destinations whose breaker is not closed
	Destinations []destinationView `json:"destinations"`
	HasDests     bool              `json:"-"`
	Relays       []relayView       `json:"relays"`
	HasRelays    bool              `json:"-"`
	Retrying     retryingView      `json:"retrying"`
	Charts       []chart           `json:"charts"` // nil when Config.Rate is nil
	Backlog      []backlogView     `json:"backlog"`
	Blocked      []blockedView     `json:"parked_keys"`
	MoreBlocked  bool              `json:"more_parked_keys"`
	Pauses       pausesView        `json:"-"`
	Paused       []pausedView      `json:"paused"`
	Now          time.Time         `json:"now"`
	// Refresh is how often, in milliseconds, the page's script refreshes
	// it.
	Refresh int `json:"-"`
	// Retried is the count a retry-now action reports back.
	Retried string `json:"-"`
	// Blank holds a zero row of each live table: the page's script
	// fills copies of it on refresh.
	Blank blanks `json:"-"`
}

type blanks struct {
	Outage      outageView
	Destination destinationView
	Relay       relayView
	Group       retryGroupView
	Backlog     backlogView
}

type totalsView struct {
	Ready      int64 `json:"ready"`
	Claimed    int64 `json:"claimed"`
	Dead       int64 `json:"dead"`
	ParkedKeys int64 `json:"parked_keys"`
	Retrying   int64 `json:"retrying"`
	// Stuck counts the ready events that wait for a destination that is
	// down: the part of Ready an open breaker holds.
	Stuck                int64   `json:"waiting_for_down_destinations"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	OldestPending        string  `json:"oldest_pending"`
}

type outageView struct {
	Destination string `json:"destination"`
	Breaker     string `json:"breaker"`
	// Waiting counts the ready events of the topics routed to it; -1 when
	// the routes are not known.
	Waiting   int64  `json:"waiting"`
	LastError string `json:"last_error"`
}

type destinationView struct {
	Destination
	Waiting     int64  `json:"waiting"` // ready events routed to it; -1 unknown
	Paused      bool   `json:"paused"`
	LastErrorAt string `json:"last_error_time"`
	State       string `json:"state"` // the breaker, or "paused"
	// PausedTopics counts the paused topics routed to it (0 when the
	// routes are not known), PausedNote says so ("1 topic paused") and
	// PausedNames names them, for its title.
	PausedTopics int    `json:"paused_topics"`
	PausedNote   string `json:"paused_note"`
	PausedNames  string `json:"paused_topic_names"`
}

type relayView struct {
	Owner       string  `json:"owner"`
	Version     string  `json:"version"`
	Started     string  `json:"started"`
	Uptime      string  `json:"uptime"`
	Heartbeat   string  `json:"heartbeat_age"`
	LastClaim   string  `json:"last_claim_age"`
	Leased      int64   `json:"leased"`
	Published   int64   `json:"published"`
	HeartbeatAt float64 `json:"heartbeat_at_unix"`
}

type retryingView struct {
	Groups []retryGroupView `json:"groups"`
	More   bool             `json:"more_groups"`
	Total  int64            `json:"total"` // events in the groups shown
}

type retryGroupView struct {
	ID          string `json:"id"`           // stands for the error in forms and URLs: the error may be long
	LastError   string `json:"last_error"`   // as shown (shownError), cut at 300 characters
	StoredError string `json:"stored_error"` // as stored (storedError), for its title
	Count       int64  `json:"count"`
	Topics      int64  `json:"topics"`
	MaxAttempts int    `json:"max_attempts"`
	NextAttempt string `json:"next_attempt"` // from now, such as "in 42s"; "now" when due
	Oldest      string `json:"oldest_age"`
}

type backlogView struct {
	Topic         string `json:"topic"`
	Ready         int64  `json:"ready"`
	Claimed       int64  `json:"claimed"`
	Dead          int64  `json:"dead"`
	ParkedKeys    int64  `json:"parked_keys"`
	OldestPending string `json:"oldest_pending"`
	Paused        bool   `json:"paused"`
	Destination   string `json:"destination,omitempty"`
	Down          bool   `json:"destination_down"`
}

type blockedView struct {
	Topic   string `json:"topic"`
	Key     string `json:"key"`
	EventID string `json:"event_id"`
	Waiting int64  `json:"waiting"`
	Since   string `json:"since"`
}

type pausedView struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Waiting int64  `json:"waiting"`
	Since   string `json:"since"`
	By      string `json:"by"`
	Reason  string `json:"reason"`
}

// groupID names a retry group in forms and URLs by a digest of its error,
// which may be long and is shown scrubbed, never sent back whole.
func groupID(lastError string) string {
	sum := sha256.Sum256([]byte(lastError))
	return hex.EncodeToString(sum[:8])
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	v, what, err := h.overviewData(r)
	if err != nil {
		h.storeFailed(w, r, what, err)
		return
	}
	if wantsJSON(r) {
		h.writeJSON(w, http.StatusOK, v)
		return
	}
	if n := r.URL.Query().Get("retried"); n != "" {
		if _, err := strconv.Atoi(n); err == nil {
			v.Retried = n
		}
	}
	h.render(w, r, http.StatusOK, "overview", "Overview", v)
}

// overviewData reads everything the overview shows; on failure it says
// what it was reading.
func (h *handler) overviewData(r *http.Request) (overviewView, string, error) {
	ctx, cancel := storeCtx(r)
	defer cancel()
	now := h.now()
	v := overviewView{Now: now.UTC(), Refresh: int(h.cfg.Refresh / time.Millisecond)}
	backlog, err := h.cfg.Admin.Backlog(ctx)
	if err != nil {
		return v, "reading the backlog", err
	}
	blocked, err := h.cfg.Admin.BlockedKeys(ctx, blockedKeysShown+1)
	if err != nil {
		return v, "listing parked keys", err
	}
	if v.Pauses, err = h.pausesOf(r, backlog); err != nil {
		return v, "reading the pauses", err
	}
	slices.SortFunc(backlog, func(a, b heraldadmin.TopicBacklog) int { return cmp.Compare(a.Topic, b.Topic) })

	h.destinationsOf(&v, backlog)
	down := map[string]bool{}
	for _, o := range v.Outages {
		down[o.Destination] = true
	}
	var oldest time.Duration
	for _, b := range backlog {
		t := &v.Totals
		t.Ready += b.Ready
		t.Claimed += b.Claimed
		t.Dead += b.Dead
		t.ParkedKeys += b.ParkedKeys
		oldest = max(oldest, b.OldestPending)
		bv := backlogView{Topic: b.Topic, Ready: b.Ready, Claimed: b.Claimed, Dead: b.Dead, ParkedKeys: b.ParkedKeys,
			OldestPending: age(b.OldestPending), Paused: v.Pauses.PausedTopics[b.Topic], Destination: h.destinationOf(b.Topic)}
		bv.Down = down[bv.Destination]
		if bv.Down {
			t.Stuck += b.Ready
		}
		v.Backlog = append(v.Backlog, bv)
	}
	v.Totals.OldestPendingSeconds, v.Totals.OldestPending = oldest.Seconds(), age(oldest)

	for _, b := range blocked[:min(len(blocked), blockedKeysShown)] {
		v.Blocked = append(v.Blocked, blockedView{Topic: clean(b.Topic), Key: clean(b.Key), EventID: b.EventID, Waiting: b.Waiting, Since: when(b.Since)})
	}
	v.MoreBlocked = len(blocked) > blockedKeysShown
	for _, held := range v.Pauses.Held {
		v.Paused = append(v.Paused, pausedView{Kind: string(held.Kind), Name: clean(held.Name), Waiting: held.Waiting,
			Since: when(held.Since), By: clean(held.By), Reason: clean(held.Reason)})
	}

	if rt, ok := h.cfg.Admin.(heraldadmin.Retrying); ok {
		groups, err := rt.RetryGroups(ctx, retryGroupsShown+1)
		if err != nil {
			return v, "grouping the retrying events", err
		}
		v.Retrying = retryingOf(groups, retryGroupsShown, now)
		v.Totals.Retrying = v.Retrying.Total
	}
	if rl, ok := h.cfg.Admin.(heraldadmin.Relays); ok {
		v.HasRelays = true
		relays, err := rl.ListRelays(ctx)
		if err != nil {
			return v, "listing the running relays", err
		}
		for _, ri := range relays {
			v.Relays = append(v.Relays, relayOf(ri, now))
		}
	}
	if h.cfg.Rate != nil {
		v.Charts = charts(h.cfg.Rate())
	}
	return v, "", nil
}

// destinationOf names the destination of topic; "" when unknown.
func (h *handler) destinationOf(topic string) string {
	switch {
	case h.cfg.DestinationOf != nil:
		return h.cfg.DestinationOf(topic)
	case h.cfg.DestinationStatus != nil:
		// One destination and no routes: every topic goes there.
		if ds := h.cfg.DestinationStatus(); len(ds) == 1 {
			return ds[0].Name
		}
	}
	return ""
}

// destinationsOf fills the Destinations section and the outages: a
// destination whose breaker is not closed holds the ready events of the
// topics routed to it, and the page says so next to the backlog figures.
func (h *handler) destinationsOf(v *overviewView, backlog []heraldadmin.TopicBacklog) {
	if h.cfg.DestinationStatus == nil {
		return
	}
	v.HasDests = true
	paused := map[string]bool{}
	pausedTopics := map[string][]string{} // by destination
	for _, held := range v.Pauses.Held {
		switch held.Kind {
		case herald.PauseDestination:
			paused[held.Name] = true
		case herald.PauseTopic:
			// The topic's own route, not the backlog's topics: a paused
			// topic with nothing waiting is paused all the same.
			if d := h.destinationOf(held.Name); d != "" {
				pausedTopics[d] = append(pausedTopics[d], clean(held.Name))
			}
		}
	}
	for _, d := range h.cfg.DestinationStatus() {
		dv := destinationView{Destination: d, Paused: paused[d.Name], State: d.Breaker}
		dv.Name, dv.LastError = clean(d.Name), clean(herald.Scrub(d.LastError))
		if !d.LastErrorAt.IsZero() {
			dv.LastErrorAt = when(d.LastErrorAt)
		}
		if dv.Paused {
			dv.State = "paused"
		}
		if names := pausedTopics[d.Name]; len(names) > 0 {
			slices.Sort(names)
			dv.PausedTopics, dv.PausedNote = len(names), plural(len(names), "topic")+" paused"
			dv.PausedNames = "paused: " + strings.Join(names, ", ")
		}
		for _, b := range backlog {
			if h.destinationOf(b.Topic) == d.Name {
				dv.Waiting += b.Ready
			}
		}
		if h.cfg.DestinationOf == nil && len(h.cfg.DestinationStatus()) > 1 {
			dv.Waiting = -1
		}
		v.Destinations = append(v.Destinations, dv)
		if d.Breaker != "" && d.Breaker != "closed" {
			v.Outages = append(v.Outages, outageView{Destination: dv.Name, Breaker: d.Breaker, Waiting: dv.Waiting, LastError: dv.LastError})
		}
	}
}

func retryingOf(groups []heraldadmin.RetryGroup, shown int, now time.Time) retryingView {
	v := retryingView{More: len(groups) > shown}
	for _, g := range groups[:min(len(groups), shown)] {
		v.Total += g.Count
		v.Groups = append(v.Groups, retryGroupView{
			ID: groupID(g.LastError), LastError: truncate(shownError(g.LastError), 300), StoredError: truncate(storedError(g.LastError), 2000),
			Count: g.Count, Topics: g.Topics,
			MaxAttempts: g.MaxAttempts, NextAttempt: until(g.NextAttempt, now), Oldest: age(now.Sub(g.Oldest)),
		})
	}
	return v
}

func relayOf(ri heraldadmin.RelayInfo, now time.Time) relayView {
	v := relayView{Owner: clean(ri.Owner), Version: clean(ri.Version), Started: when(ri.StartedAt), Uptime: age(now.Sub(ri.StartedAt)),
		Heartbeat: age(now.Sub(ri.HeartbeatAt)) + " ago", LastClaim: "never", Leased: ri.Leased, Published: ri.Published,
		HeartbeatAt: float64(ri.HeartbeatAt.UnixMilli()) / 1000}
	if ri.LastClaimAt != nil {
		v.LastClaim = age(now.Sub(*ri.LastClaimAt)) + " ago"
	}
	return v
}

// until says when t comes, from now: "in 42s", or "now" once due.
func until(t, now time.Time) string {
	if !t.After(now) {
		return "now"
	}
	return "in " + age(t.Sub(now))
}

// lookupGroup finds the retry group named id.
func lookupGroup(ctx context.Context, rt heraldadmin.Retrying, id string) (heraldadmin.RetryGroup, bool, error) {
	groups, err := rt.RetryGroups(ctx, maxRetryGroups)
	if err != nil {
		return heraldadmin.RetryGroup{}, false, err
	}
	for _, g := range groups {
		if groupID(g.LastError) == id {
			return g, true, nil
		}
	}
	return heraldadmin.RetryGroup{}, false, nil
}
