package heraldui_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
)

func TestPauses(t *testing.T) {
	t.Parallel()

	t.Run("PauseAndResumeFromTheOverviewAreAudited", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken, func(c *heraldui.Config) {
			c.DestinationOf = func(string) string { return "kafka" }
			c.Destinations = func() []string { return []string{"webhook", "kafka"} }
		})
		b.write(t, herald.Message{Topic: "orders"}, herald.Message{Topic: "orders"})
		s := b.login(t)
		page := b.get(t, "/", s.send)
		require.Contains(t, page.Body, `id="paused-empty"`)
		form := formOf(t, page.Body, "pause-form")
		require.Equal(t, "/pauses/pause", form.action)
		require.Contains(t, page.Body, `<option value="kafka">`, "the relay's destinations are offered")

		form.values.Set("kind", "destination")
		form.values.Set("name", "kafka")
		form.values.Set("reason", "broker upgrade")
		res := b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusSeeOther, res.Code, res.Body)
		ps, err := b.store.Pauses(t.Context())
		require.NoError(t, err)
		require.Len(t, ps, 1)
		require.Equal(t, "admin page: 192.0.2.1:1234", ps[0].By)

		page = b.get(t, "/", s.send)
		require.Regexp(t, `<tr data-kind="destination" data-name="kafka">(?s:.)*?<td class="num waiting">2</td>`, page.Body,
			"the destination holds the ready events of the topics routed to it")
		require.Contains(t, page.Body, `<span class="badge paused" data-show="paused">paused</span>`)
		res = b.post(t, "/pauses/resume", url.Values{"csrf": {s.csrf}, "kind": {"destination"}, "name": {"kafka"}}, s.send)
		require.Equal(t, http.StatusSeeOther, res.Code, res.Body)
		require.Contains(t, b.get(t, "/", s.send).Body, `id="paused-empty"`)

		lines := b.auditLines(t)
		pause, resumed := lines[len(lines)-2], lines[len(lines)-1]
		require.Equal(t, "pause", pause["action"])
		require.Equal(t, "destination", pause["kind"])
		require.Equal(t, "kafka", pause["name"])
		require.Equal(t, "broker upgrade", pause["reason"])
		require.Equal(t, "resume", resumed["action"])
		require.Equal(t, "done", resumed["outcome"])
	})

	t.Run("ADestinationSaysWhichOfItsTopicsArePaused", func(t *testing.T) {
		t.Parallel()
		dests := func() []heraldui.Destination {
			return []heraldui.Destination{{Name: "kafka", Breaker: "closed"}, {Name: "webhook", Breaker: "closed"}}
		}
		routed := setup(t, testToken, func(c *heraldui.Config) {
			c.DestinationStatus = dests
			c.DestinationOf = func(topic string) string {
				if strings.HasPrefix(topic, "hooks.") {
					return "webhook"
				}
				return "kafka"
			}
		})
		unrouted := setup(t, testToken, func(c *heraldui.Config) { c.DestinationStatus = dests })
		for _, b := range []*bundle{routed, unrouted} {
			b.write(t, herald.Message{Topic: "orders"})
			// billing has no event: paused all the same.
			for _, topic := range []string{"orders", "billing"} {
				require.NoError(t, b.store.Pause(t.Context(), heraldadmin.PauseParams{Kind: herald.PauseTopic, Name: topic}))
			}
		}

		byName := func(b *bundle) map[string]map[string]any {
			out := map[string]map[string]any{}
			for _, d := range jsonOf(t, b.get(t, "/", asJSON))["destinations"].([]any) {
				out[d.(map[string]any)["name"].(string)] = d.(map[string]any)
			}
			return out
		}
		ds := byName(routed)
		require.Equal(t, "2 topics paused", ds["kafka"]["paused_note"])
		require.Equal(t, "paused: billing, orders", ds["kafka"]["paused_topic_names"])
		require.Equal(t, "closed", ds["kafka"]["state"], "the destination itself is not paused")
		require.InDelta(t, 0, ds["webhook"]["paused_topics"], 0)
		page := routed.get(t, "/").Body
		require.Regexp(t, `<tr data-key="kafka"(?s:.)*?title="paused: billing, orders">2 topics paused</span>`, page)

		// Without routes the page cannot tell where a topic goes: it says
		// nothing on the destinations' rows (the Paused section lists the
		// topics).
		for name, d := range byName(unrouted) {
			require.InDelta(t, 0, d["paused_topics"], 0, name)
			require.Empty(t, d["paused_note"], name)
		}
	})

	t.Run("PausingNeedsTheTokenAndTheCSRFToken", func(t *testing.T) {
		t.Parallel()
		form := url.Values{"kind": {"topic"}, "name": {"orders"}}
		ro := setup(t, "")
		require.NotContains(t, ro.get(t, "/").Body, `id="pause-form"`, "a read-only page offers no pause")
		require.Equal(t, http.StatusForbidden, ro.post(t, "/pauses/pause", form).Code)

		b := setup(t, testToken)
		require.Equal(t, http.StatusUnauthorized, b.post(t, "/pauses/pause", form).Code)
		s := b.login(t)
		res := b.post(t, "/pauses/pause", form, s.send)
		require.Equal(t, http.StatusForbidden, res.Code)
		require.Contains(t, res.Body, "CSRF")
		ps, err := b.store.Pauses(t.Context())
		require.NoError(t, err)
		require.Empty(t, ps, "nothing was paused")
		require.Equal(t, http.StatusSeeOther, b.post(t, "/pauses/pause", form, withBearer(testToken)).Code, "a script's bearer token")
	})

	t.Run("BadPausesAreRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		for _, f := range []url.Values{
			{"kind": {"queue"}, "name": {"x"}},
			{"kind": {"topic"}, "name": {""}},
			{"kind": {"topic"}, "name": {"has space"}},
			{"kind": {"destination"}, "name": {"a\nb"}},
		} {
			res := b.post(t, "/pauses/pause", f, withBearer(testToken))
			require.Equal(t, http.StatusBadRequest, res.Code, f)
		}
		require.Equal(t, http.StatusNotFound, b.post(t, "/pauses/stop", url.Values{}, withBearer(testToken)).Code)
		ps, err := b.store.Pauses(t.Context())
		require.NoError(t, err)
		require.Empty(t, ps)
	})
}
