package heraldui_test

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
)

// retry writes msgs and fails each once the way a relay does: claimed,
// then rescheduled an hour later with lastError.
func (b *bundle) retry(t *testing.T, lastError string, msgs ...herald.Message) []string {
	t.Helper()
	ids := b.write(t, msgs...)
	token := uuid.NewString()
	envs, err := b.store.Claim(t.Context(), herald.ClaimParams{Token: token, Owner: "heraldui-test", Limit: 10000, Lease: time.Hour, Unordered: true})
	require.NoError(t, err)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var failed []herald.Failure
	for _, e := range envs {
		f := herald.Failure{ID: e.ID, Outcome: herald.OutcomeReleased}
		if want[e.ID] {
			f = herald.Failure{ID: e.ID, Outcome: herald.OutcomeRetry, Error: lastError, Delay: time.Hour}
		}
		failed = append(failed, f)
	}
	_, err = b.store.Complete(t.Context(), herald.CompleteParams{Token: token, Failed: failed})
	require.NoError(t, err)
	return ids
}

func jsonOf(t *testing.T, res response) map[string]any {
	t.Helper()
	require.Equal(t, "application/json", res.Header.Get("Content-Type"), res.Body)
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(res.Body), &v), res.Body)
	return v
}

var asJSON = withHeader("Accept", "application/json")

// relaysStore is the SQLite store with heraldadmin.Relays, as a driver
// that records heartbeats offers it.
type relaysStore struct {
	*heraldsqlite.Driver
	relays []heraldadmin.RelayInfo
}

func (s relaysStore) ListRelays(context.Context) ([]heraldadmin.RelayInfo, error) {
	return s.relays, nil
}

func TestDashboard(t *testing.T) {
	t.Parallel()

	t.Run("AnOpenBreakerIsShownWithTheBacklogItHolds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", func(c *heraldui.Config) {
			c.DestinationStatus = func() []heraldui.Destination {
				return []heraldui.Destination{
					{Name: "kafka", Breaker: "closed", InFlight: 2},
					{Name: "webhook", Breaker: "open", Failures: 5, LastError: "dial tcp 10.0.0.7:443: connection refused token=abc123",
						LastErrorAt: time.Now()},
				}
			}
			c.DestinationOf = func(topic string) string {
				if strings.HasPrefix(topic, "hooks.") {
					return "webhook"
				}
				return "kafka"
			}
		})
		b.write(t, herald.Message{Topic: "hooks.a"}, herald.Message{Topic: "hooks.a"}, herald.Message{Topic: "hooks.b"},
			herald.Message{Topic: "orders"})

		v := jsonOf(t, b.get(t, "/", asJSON))
		totals := v["totals"].(map[string]any)
		require.InDelta(t, 4, totals["ready"], 0)
		require.InDelta(t, 3, totals["waiting_for_down_destinations"], 0, "the ready events of the topics routed to the open breaker")
		outages := v["outages"].([]any)
		require.Len(t, outages, 1)
		o := outages[0].(map[string]any)
		require.Equal(t, "webhook", o["destination"])
		require.InDelta(t, 3, o["waiting"], 0)
		require.Contains(t, o["last_error"], "connection refused")
		require.NotContains(t, o["last_error"], "abc123", "scrubbed")
		dests := v["destinations"].([]any)
		require.Equal(t, "closed", dests[0].(map[string]any)["state"])
		require.InDelta(t, 2, dests[0].(map[string]any)["in_flight"], 0)
		require.InDelta(t, 1, dests[0].(map[string]any)["waiting"], 0)
		require.Equal(t, "open", dests[1].(map[string]any)["state"])

		page := b.get(t, "/").Body
		require.Regexp(t, `(?s)class="error outage".*webhook.*is down.*>3</span> ready events wait for it`, page)
		require.Regexp(t, `id="stuck"[^>]*><span[^>]*>3</span> wait for a down destination`, page)
		require.Regexp(t, `(?s)<tr data-key="webhook"[^>]*>.*state-open`, page)
		require.Regexp(t, `(?s)data-f="topic">hooks.a</span>.*data-show="destination_down">destination down`, page)
		require.NotContains(t, page, "abc123")
	})

	t.Run("NoOutageWhenEveryBreakerIsClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", func(c *heraldui.Config) {
			c.DestinationStatus = func() []heraldui.Destination { return []heraldui.Destination{{Name: "default", Breaker: "closed"}} }
		})
		b.write(t, herald.Message{Topic: "orders"})
		v := jsonOf(t, b.get(t, "/", asJSON))
		require.Empty(t, v["outages"])
		require.InDelta(t, 0, v["totals"].(map[string]any)["waiting_for_down_destinations"], 0)
		require.InDelta(t, 1, v["destinations"].([]any)[0].(map[string]any)["waiting"], 0, "one destination takes every topic")
	})

	t.Run("RetryingEventsAreGroupedByTheirLastError", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "")
		refused := b.retry(t, "connection refused", herald.Message{Topic: "orders"}, herald.Message{Topic: "billing"})
		b.retry(t, "HTTP 503 <b>busy</b>", herald.Message{Topic: "orders"})
		b.write(t, herald.Message{Topic: "orders"}) // ready, never failed

		v := jsonOf(t, b.get(t, "/", asJSON))
		require.InDelta(t, 3, v["totals"].(map[string]any)["retrying"], 0)
		groups := v["retrying"].(map[string]any)["groups"].([]any)
		require.Len(t, groups, 2)
		g := groups[0].(map[string]any)
		require.Equal(t, "connection refused", g["last_error"], "the largest group first")
		require.InDelta(t, 2, g["count"], 0)
		require.InDelta(t, 2, g["topics"], 0)
		require.Regexp(t, `^in (59m|1h)`, g["next_attempt"])

		page := b.get(t, "/").Body
		require.Contains(t, page, "HTTP 503 &lt;b&gt;busy&lt;/b&gt;", "escaped")

		group := jsonOf(t, b.get(t, "/retrying?group="+g["id"].(string), asJSON))
		var ids []string
		for _, e := range group["events"].([]any) {
			ids = append(ids, e.(map[string]any)["id"].(string))
		}
		require.ElementsMatch(t, refused, ids)
		html := b.get(t, "/retrying?group="+g["id"].(string))
		require.Equal(t, http.StatusOK, html.Code)
		require.Contains(t, html.Body, refused[0])
		require.NotContains(t, html.Body, `id="retry-group"`, "read-only: no action")
	})

	t.Run("RetryNowMakesAGroupAvailableAndIsAudited", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		refused := b.retry(t, "connection refused", herald.Message{Topic: "orders", Key: "k"})
		other := b.retry(t, "HTTP 500", herald.Message{Topic: "orders"})
		s := b.login(t)
		v := jsonOf(t, b.get(t, "/", asJSON))
		var id string
		for _, g := range v["retrying"].(map[string]any)["groups"].([]any) {
			if g.(map[string]any)["last_error"] == "connection refused" {
				id = g.(map[string]any)["id"].(string)
			}
		}
		require.NotEmpty(t, id)
		page := b.get(t, "/", s.send).Body
		require.Contains(t, page, `name="group" value="`+id+`"`, "the group's form names it by its id, never by its error")

		form := url.Values{"csrf": {s.csrf}, "group": {id}}
		res := b.post(t, "/retrying/retry-now", form, s.send)
		require.Equal(t, http.StatusBadRequest, res.Code, "not confirmed")
		form.Set("confirm", "yes")
		res = b.post(t, "/retrying/retry-now", url.Values{"group": {id}, "confirm": {"yes"}}, s.send)
		require.Equal(t, http.StatusForbidden, res.Code, "no CSRF token")
		res = b.post(t, "/retrying/retry-now", form)
		require.Equal(t, http.StatusUnauthorized, res.Code, "not logged in")
		res = b.post(t, "/retrying/retry-now", form, withBearer("wrong-token-wrong-token"), asJSON)
		require.Equal(t, http.StatusUnauthorized, res.Code)
		require.Contains(t, jsonOf(t, res)["error"], "bearer token is wrong")
		before, err := b.store.GetEvent(t.Context(), refused[0])
		require.NoError(t, err)
		require.True(t, before.AvailableAt.After(time.Now().Add(30*time.Minute)))

		res = b.post(t, "/retrying/retry-now", form, s.send)
		require.Equal(t, http.StatusSeeOther, res.Code, res.Body)
		require.Equal(t, "/?retried=1#retrying-section", res.Header.Get("Location"))
		after, err := b.store.GetEvent(t.Context(), refused[0])
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), after.AvailableAt, time.Minute, "available now")
		require.Equal(t, before.Attempt, after.Attempt, "no attempt spent or refunded")
		o, err := b.store.GetEvent(t.Context(), other[0])
		require.NoError(t, err)
		require.True(t, o.AvailableAt.After(time.Now().Add(30*time.Minute)), "the other group waits on")
		require.Contains(t, b.get(t, "/?retried=1", s.send).Body, `id="retried">1 events were made available now`)

		res = b.post(t, "/retrying/retry-now", form, withBearer(testToken), asJSON)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.InDelta(t, 0, jsonOf(t, res)["changed"], 0, "an event available already is left as it is")
		res = b.post(t, "/retrying/retry-now", url.Values{"group": {"0123456789abcdef"}, "confirm": {"yes"}}, withBearer(testToken), asJSON)
		require.Equal(t, http.StatusNotFound, res.Code, "no retrying event has that error")
		lines := b.auditLines(t)
		require.Equal(t, "retry_now", lines[len(lines)-1]["action"])
		require.Equal(t, "no such group", lines[len(lines)-1]["outcome"])
		var done map[string]any
		for _, l := range lines {
			if l["action"] == "retry_now" && l["outcome"] == "done" && done == nil {
				done = l
			}
		}
		require.NotNil(t, done)
		require.InDelta(t, 1, done["changed"], 0)
		require.Equal(t, "connection refused", done["last_error"])
	})

	t.Run("RunningRelaysAreShownWhenTheStoreListsThem", func(t *testing.T) {
		t.Parallel()
		// Ages in hours, which the page shows to the minute: a slow
		// machine takes seconds between here and the page, not a minute.
		now := time.Now()
		claim := now.Add(-3 * time.Hour)
		b := setup(t, "", func(c *heraldui.Config) {
			c.Admin = relaysStore{Driver: c.Admin.(*heraldsqlite.Driver), relays: []heraldadmin.RelayInfo{{
				Owner: "host-a/4242", Version: "v1.4.0", StartedAt: now.Add(-5 * time.Hour), HeartbeatAt: now.Add(-2 * time.Hour),
				LastClaimAt: &claim, Leased: 7, Published: 12345,
			}}}
		})
		v := jsonOf(t, b.get(t, "/", asJSON))
		relays := v["relays"].([]any)
		require.Len(t, relays, 1)
		r := relays[0].(map[string]any)
		require.Equal(t, "host-a/4242", r["owner"])
		require.InDelta(t, 12345, r["published"], 0)
		require.Equal(t, "5h00m", r["uptime"])
		page := b.get(t, "/").Body
		require.Contains(t, page, `id="relays-section"`)
		require.Regexp(t, `(?s)<tr data-key="host-a/4242"[^>]*>.*v1.4.0.*2h00m ago.*3h00m ago.*>7<.*>12345<`, page)

		plain := setup(t, "", func(c *heraldui.Config) { c.Admin = adminOnly{c.Admin} })
		require.NotContains(t, plain.get(t, "/").Body, `id="relays-section"`, "a store without heartbeats has no Relays section")
		require.Nil(t, jsonOf(t, plain.get(t, "/", asJSON))["relays"])
	})
}

// Every page answers its URL with JSON when asked, under the same access
// rules; refusals and bad input are JSON too.
func TestJSONAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	dead := b.kill(t, true, "broker said no token=s3cr3t", herald.Message{Topic: "orders", Key: "k",
		Headers: map[string]string{"Authorization": "Bearer xyz", "X-Tenant": "acme"}, Payload: []byte(`{"n":1}`)})
	b.retry(t, "HTTP 500", herald.Message{Topic: "billing"})

	t.Run("Overview", func(t *testing.T) {
		v := jsonOf(t, b.get(t, "/", asJSON))
		require.InDelta(t, 1, v["totals"].(map[string]any)["dead"], 0)
		require.Len(t, v["parked_keys"], 1)
		require.Len(t, v["backlog"], 2)
		require.NotEmpty(t, v["now"])
	})
	t.Run("DeadLetters", func(t *testing.T) {
		v := jsonOf(t, b.get(t, "/dead?topic=orders", asJSON))
		events := v["events"].([]any)
		require.Len(t, events, 1)
		e := events[0].(map[string]any)
		require.Equal(t, dead[0], e["id"])
		require.Equal(t, "dead", e["state"])
		require.True(t, e["parked"].(bool))
		require.NotContains(t, e["last_error"], "s3cr3t")
		require.Nil(t, e["payload"], "lists carry no payloads")
	})
	t.Run("Event", func(t *testing.T) {
		e := jsonOf(t, b.get(t, "/events/"+dead[0], asJSON))
		require.Equal(t, "(hidden)", e["headers"].(map[string]any)["Authorization"])
		require.Equal(t, "acme", e["headers"].(map[string]any)["X-Tenant"])
		require.Equal(t, `{"n":1}`, e["payload"].(map[string]any)["text"])
	})
	t.Run("Retrying", func(t *testing.T) {
		v := jsonOf(t, b.get(t, "/retrying", asJSON))
		require.Len(t, v["retrying"].(map[string]any)["groups"], 1)
	})
	t.Run("Confirm", func(t *testing.T) {
		v := jsonOf(t, b.get(t, "/confirm?action=requeue&id="+dead[0], asJSON, withBearer(testToken)))
		require.InDelta(t, 1, v["count"], 0)
	})
	t.Run("ActionsAnswerJSONWithBearer", func(t *testing.T) {
		b.write(t, herald.Message{Topic: "orders", Key: "k", Payload: []byte(`{"n":2}`)}) // waits behind it
		res := b.post(t, "/actions/discard", url.Values{"id": {dead[0]}, "confirm": {"yes"}}, asJSON, withBearer(testToken))
		require.Equal(t, http.StatusConflict, res.Code, "it parks its key, with an event waiting")
		require.Contains(t, jsonOf(t, res)["error"], "parks key")
		res = b.post(t, "/actions/requeue", url.Values{"id": {dead[0]}, "confirm": {"yes"}}, asJSON, withBearer(testToken))
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.InDelta(t, 1, jsonOf(t, res)["changed"], 0)
	})
	t.Run("RefusalsAndBadInputAreJSON", func(t *testing.T) {
		for _, tc := range []struct {
			method, target string
			form           url.Values
			opts           []func(*http.Request)
			code           int
			says           string
		}{
			{"GET", "/events/nope", nil, nil, 400, "is not an event id"},
			{"GET", "/dead?limit=0", nil, nil, 400, "limit must be"},
			{"GET", "/retrying?group=<script>", nil, nil, 400, "is not a retry group"},
			{"GET", "/retrying?group=0123456789abcdef", nil, nil, 404, "No retrying event has that error"},
			{"GET", "/nothing", nil, nil, 404, "There is no page"},
			{"POST", "/retrying/retry-now", url.Values{"confirm": {"yes"}, "group": {"zz"}}, []func(*http.Request){withBearer(testToken)}, 400, "is not a retry group"},
			{"POST", "/actions/requeue", url.Values{"confirm": {"yes"}, "id": {dead[0]}}, nil, 401, "Log in"},
			{"GET", "/replay", nil, nil, 404, "Replay is not available"},
		} {
			res := b.do(t, tc.method, tc.target, tc.form, append([]func(*http.Request){asJSON}, tc.opts...)...)
			require.Equal(t, tc.code, res.Code, "%s %s: %s", tc.method, tc.target, res.Body)
			v := jsonOf(t, res)
			require.InDelta(t, tc.code, v["status"], 0)
			require.Contains(t, html.UnescapeString(v["error"].(string)), tc.says)
			require.NotContains(t, res.Body, "<script>")
		}
	})
}

// fakeReplay is a Config.Replay that counts what it is asked.
type fakeReplay struct {
	calls atomic.Int32
	last  atomic.Pointer[heraldui.ReplayRequest]
	count int
	fail  error
}

func (f *fakeReplay) replay(_ context.Context, req heraldui.ReplayRequest) (heraldui.ReplayResult, error) {
	f.calls.Add(1)
	f.last.Store(&req)
	if f.fail != nil {
		return heraldui.ReplayResult{}, f.fail
	}
	return heraldui.ReplayResult{Events: f.count, ByDestination: map[string]int{"kafka": f.count}}, nil
}

func TestReplayPage(t *testing.T) {
	t.Parallel()
	fr := &fakeReplay{count: 12}
	b := setup(t, testToken, func(c *heraldui.Config) { c.Replay = fr.replay })
	s := b.login(t)

	page := b.get(t, "/replay", s.send)
	require.Equal(t, http.StatusOK, page.Code)
	require.Contains(t, page.Body, `id="replay-form"`)
	require.Contains(t, b.get(t, "/replay").Body, `id="replay-login"`, "without a login there is no form")
	require.Contains(t, page.Body, `href="/replay"`, "the navigation names the page")

	form := url.Values{"csrf": {s.csrf}, "topic": {"orders"}, "since": {"2h"}, "by_key": {"1"}, "key": {""}, "rate": {"20"}}
	res := b.post(t, "/replay/count", form, s.send)
	require.Equal(t, http.StatusOK, res.Code, res.Body)
	require.Contains(t, res.Body, `id="replay-confirm"`)
	require.Regexp(t, `id="replay-count"><b>12 events</b> match · kafka: 12`, res.Body)
	require.Contains(t, res.Body, "Replay 12 events at up to 20 a second")
	req := fr.last.Load()
	require.True(t, req.DryRun)
	require.Equal(t, "orders", req.Filter.Topic)
	require.NotNil(t, req.Filter.Key, "by_key with an empty key selects the events without one")
	require.Empty(t, *req.Filter.Key)
	require.WithinDuration(t, time.Now().Add(-2*time.Hour), req.Filter.Since, time.Minute)
	require.Equal(t, 20, req.Rate)

	// The confirmation form carries the same selection.
	hidden := regexp.MustCompile(`name="(topic|since|by_key|key|rate|confirm)" value="([^"]*)"`).FindAllStringSubmatch(res.Body, -1)
	run := url.Values{"csrf": {s.csrf}}
	for _, m := range hidden {
		run.Set(m[1], html.UnescapeString(m[2]))
	}
	require.Equal(t, "yes", run.Get("confirm"))
	res = b.post(t, "/replay/run", run, s.send)
	require.Equal(t, http.StatusOK, res.Code, res.Body)
	require.Contains(t, res.Body, `id="replay-done">Replayed 12 events · kafka: 12`)
	require.False(t, fr.last.Load().DryRun)
	require.Equal(t, "orders", fr.last.Load().Filter.Topic)

	lines := b.auditLines(t)
	require.Equal(t, "replay_count", lines[len(lines)-2]["action"])
	require.Equal(t, "replay", lines[len(lines)-1]["action"])
	require.InDelta(t, 12, lines[len(lines)-1]["events"], 0)
	require.Equal(t, "orders", lines[len(lines)-1]["topic"])

	calls := fr.calls.Load()
	for _, tc := range []struct {
		name string
		form url.Values
		path string
		code int
		says string
	}{
		{"NoSelection", url.Values{"csrf": {s.csrf}}, "/replay/count", 400, "select the events to replay"},
		{"BadRate", url.Values{"csrf": {s.csrf}, "topic": {"o"}, "rate": {"0"}}, "/replay/count", 400, "the rate must be"},
		{"HugeRate", url.Values{"csrf": {s.csrf}, "topic": {"o"}, "rate": {"5000"}}, "/replay/count", 400, "the rate must be"},
		{"BadTime", url.Values{"csrf": {s.csrf}, "since": {"yesterday"}}, "/replay/count", 400, "is neither a time"},
		{"EmptyRange", url.Values{"csrf": {s.csrf}, "since": {"1h"}, "until": {"2h"}}, "/replay/count", 400, "the time range is empty"},
		{"BadTopic", url.Values{"csrf": {s.csrf}, "topic": {"a b"}}, "/replay/count", 400, "is not a topic"},
		{"Unconfirmed", url.Values{"csrf": {s.csrf}, "topic": {"o"}}, "/replay/run", 400, "not confirmed"},
		{"NoCSRF", url.Values{"topic": {"o"}}, "/replay/count", 403, "CSRF"},
		{"UnknownStep", url.Values{"csrf": {s.csrf}, "topic": {"o"}}, "/replay/explode", 404, "There is no page"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.post(t, tc.path, tc.form, s.send)
			require.Equal(t, tc.code, res.Code, res.Body)
			require.Contains(t, html.UnescapeString(res.Body), tc.says)
		})
	}
	require.Equal(t, calls, fr.calls.Load(), "no bad request reached the replay")
	res = b.post(t, "/replay/count", url.Values{"topic": {"o"}}, withBearer(testToken), asJSON)
	require.Equal(t, http.StatusOK, res.Code)
	require.InDelta(t, 12, jsonOf(t, res)["events"], 0)

	t.Run("MoreThanThePageReplaysIsRefused", func(t *testing.T) {
		big := &fakeReplay{count: 10001}
		b := setup(t, testToken, func(c *heraldui.Config) { c.Replay = big.replay })
		s := b.login(t)
		res := b.post(t, "/replay/count", url.Values{"csrf": {s.csrf}, "topic": {"o"}}, s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `id="replay-too-many"`)
		require.NotContains(t, res.Body, `id="replay-confirm-button"`)
	})
	t.Run("AFailedReplayIsReportedAndAudited", func(t *testing.T) {
		bad := &fakeReplay{fail: errors.New("reading published events: password=hunter2 refused")}
		b := setup(t, testToken, func(c *heraldui.Config) { c.Replay = bad.replay })
		res := b.post(t, "/replay/run", url.Values{"topic": {"o"}, "confirm": {"yes"}}, withBearer(testToken))
		require.Equal(t, http.StatusInternalServerError, res.Code)
		require.NotContains(t, res.Body, "hunter2")
		lines := b.auditLines(t)
		require.Equal(t, "failed", lines[len(lines)-1]["outcome"])
		require.NotContains(t, b.audit.String(), "hunter2")
	})
}

// adminOnly is a store that keeps no heartbeats: it shows only Admin.
type adminOnly struct{ heraldadmin.Admin }
