package heraldui_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
)

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cfg   heraldui.Config
		field string
	}{
		{"AdminIsRequired", heraldui.Config{}, "Config.Admin"},
		{"ShortTokenIsRefused", heraldui.Config{Admin: &fakeAdmin{}, Token: "short"}, "Config.Token"},
		{"PrefixWithoutLeadingSlashIsRefused", heraldui.Config{Admin: &fakeAdmin{}, Prefix: "admin"}, "Config.Prefix"},
		{"PrefixWithTwoTrailingSlashesIsRefused", heraldui.Config{Admin: &fakeAdmin{}, Prefix: "/admin//"}, "Config.Prefix"},
		{"TokenAndExternalAuthAreRefused", heraldui.Config{Admin: &fakeAdmin{}, Token: testToken, ExternalAuth: true}, "Config.ExternalAuth"},
		{"ShortRefreshIsRefused", heraldui.Config{Admin: &fakeAdmin{}, Refresh: time.Millisecond}, "Config.Refresh"},
		{"NegativeRefreshIsRefused", heraldui.Config{Admin: &fakeAdmin{}, Refresh: -time.Second}, "Config.Refresh"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := heraldui.New(tc.cfg)
			require.ErrorContains(t, err, tc.field)
		})
	}
	_, err := heraldui.New(heraldui.Config{Admin: &fakeAdmin{}})
	require.NoError(t, err, "a read-only page needs only Admin")

	t.Run("APrefixsTrailingSlashIsDropped", func(t *testing.T) {
		b := setup(t, "", func(c *heraldui.Config) { c.Prefix = "/admin/" })
		res := b.get(t, "/admin/")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `href="/admin/static/admin.css"`)
	})

	t.Run("RefreshSetsTheOverviewsScript", func(t *testing.T) {
		require.Contains(t, setup(t, "").get(t, "/").Body, `data-every="5000"`, "the default")
		b := setup(t, "", func(c *heraldui.Config) { c.Refresh = 300 * time.Millisecond })
		require.Contains(t, b.get(t, "/").Body, `data-every="300"`)
	})
}

func TestPages(t *testing.T) {
	t.Parallel()

	t.Run("OverviewShowsBacklogParkedKeysAndRate", func(t *testing.T) {
		t.Parallel()
		minute := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
		b := setup(t, "", func(c *heraldui.Config) {
			c.Rate = func() []heraldui.RatePoint {
				return []heraldui.RatePoint{
					{Minute: minute, Published: 40, Failed: 3, OldestPending: 90 * time.Second},
					{Minute: minute.Add(time.Minute)},
					{Minute: minute.Add(2 * time.Minute), Published: 2, OldestPending: 5 * time.Second},
				}
			}
		})
		dead := b.kill(t, true, "broker said no", herald.Message{Topic: "orders", Key: "order-7"})
		b.write(t, herald.Message{Topic: "orders", Key: "order-7"}, herald.Message{Topic: "orders", Key: "order-8"},
			herald.Message{Topic: "payments"})

		res := b.get(t, "/")
		require.Equal(t, http.StatusOK, res.Code)
		require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
		require.Contains(t, res.Body, `data-page="overview"`)
		require.Regexp(t, `data-f="topic">orders</span>.*\s*<td class="num" data-f="ready">2</td>\s*<td class="num" data-f="claimed">0</td>\s*`+
			`<td class="num"><a [^>]*href="dead\?topic=orders">1</a></td>\s*<td class="num" data-f="parked_keys">1</td>`, res.Body,
			"orders: 2 ready, 0 claimed, 1 dead (linked), 1 parked key")
		require.Regexp(t, `data-f="topic">payments</span>.*\s*<td class="num" data-f="ready">1</td>`, res.Body)
		require.Regexp(t, `id="total-ready"[^>]*>3<`, res.Body)
		require.Regexp(t, `id="total-dead"[^>]*>1<`, res.Body)
		require.Regexp(t, `(?s)id="parked-keys".*order-7.*href="/events/`+dead[0]+`".*<td class="num">1</td>`, res.Body,
			"the parked key, its dead event and the one event waiting behind it")
		require.Regexp(t, `id="rate-total"[^>]*>42<`, res.Body)
		require.Regexp(t, `id="failures-total"[^>]*>3<`, res.Body)
		require.Regexp(t, `id="chart-throughput-last">2<`, res.Body)
		require.Regexp(t, `id="chart-oldest-last">5s<`, res.Body)
		require.Equal(t, 3*3, strings.Count(res.Body, "<rect "), "one bar a minute, on each of three charts")
		require.Contains(t, res.Body, "<title>12:00 UTC: 40</title>")
		require.Contains(t, res.Body, "<title>12:00 UTC: 1m30s</title>")
		require.Contains(t, res.Body, "events published / minute", "the y axis says its unit")
		require.Regexp(t, `class="ylabel"[^>]*>50<`, res.Body, "a round top for the scale of 40")
		require.Regexp(t, `class="xlabel"[^>]*>12:02<`, res.Body, "the time axis is labelled")
	})

	t.Run("OverviewSaysWhenTheRateOrTheBacklogIsEmpty", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "")
		res := b.get(t, "/")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `id="rate-missing"`)
		require.Contains(t, res.Body, `id="backlog-empty"`)
		require.Contains(t, res.Body, `id="parked-empty"`)
	})

	t.Run("DeadListShowsDeadEventsOnlyAndSearchesByTopicOrID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "")
		orders := b.kill(t, false, "no route", herald.Message{Topic: "orders"}, herald.Message{Topic: "orders"})
		payments := b.kill(t, false, "no route", herald.Message{Topic: "payments"})
		ready := b.write(t, herald.Message{Topic: "orders"})

		res := b.get(t, "/dead")
		require.Equal(t, http.StatusOK, res.Code)
		for _, id := range append(orders, payments...) {
			require.Contains(t, res.Body, `data-id="`+id+`"`)
		}
		require.NotContains(t, res.Body, `data-id="`+ready[0]+`"`, "a ready event is no dead letter")
		require.Contains(t, res.Body, `<option value="orders">`, "topics with dead events are offered")

		res = b.get(t, "/dead?topic=payments")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `data-id="`+payments[0]+`"`)
		require.NotContains(t, res.Body, `data-id="`+orders[0]+`"`)

		res = b.get(t, "/dead?id="+strings.ToUpper(orders[1]))
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `data-id="`+orders[1]+`"`)
		require.Equal(t, 1, strings.Count(res.Body, `data-id=`))

		res = b.get(t, "/dead?id="+ready[0])
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `id="not-dead"`)
		require.Contains(t, res.Body, "is ready, not dead")

		res = b.get(t, "/dead?id="+herald.NewID())
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `id="unknown-id"`)

		res = b.get(t, "/dead?topic=nothing-here")
		require.Contains(t, res.Body, `id="no-dead"`)
	})

	t.Run("DeadListPagesByLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "")
		var msgs []herald.Message
		for range 5 {
			msgs = append(msgs, herald.Message{Topic: "orders"})
		}
		ids := b.kill(t, false, "x", msgs...)

		res := b.get(t, "/dead?limit=2")
		require.Equal(t, http.StatusOK, res.Code)
		require.Equal(t, 2, strings.Count(res.Body, `data-id=`))
		require.Contains(t, res.Body, `data-id="`+ids[0]+`"`, "oldest first")
		require.Contains(t, res.Body, "there are more")
		require.Contains(t, res.Body, `id="show-more" href="/dead?topic=&amp;limit=4"`)

		res = b.get(t, "/dead?limit=5")
		require.Equal(t, 5, strings.Count(res.Body, `data-id=`))
		require.NotContains(t, res.Body, "there are more")
		require.NotContains(t, res.Body, `id="show-more"`)
	})

	t.Run("EventPageShowsEverythingEscapedAndScrubbed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, true, `publishing to nats://relay:hunter2@broker:4222: <img src=x onerror=alert(2)> rejected`,
			herald.Message{
				Topic: "<i>orders</i>", Key: `"><script>alert(3)</script>`, Type: "order.placed",
				AggregateType: "order", AggregateID: "42",
				Payload: []byte("{\"note\":\"<script>alert(1)</script>\",\"rtl\":\"\u202egnp.exe\"}\n"),
				Headers: map[string]string{
					"X-Tenant":      "<b>acme</b>",
					"Authorization": "Bearer bearer-secret-value",
					"X-Api-Key":     "key-secret-value",
				},
			})
		s := b.login(t)
		res := b.get(t, "/events/"+ids[0], s.send)
		require.Equal(t, http.StatusOK, res.Code)
		body := res.Body

		require.NotContains(t, body, "<script>alert", "no markup from the database reaches the page unescaped")
		require.NotContains(t, body, "<img src=x")
		require.NotContains(t, body, "<i>orders</i>")
		require.NotContains(t, body, "<b>acme</b>")
		require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;", "the payload, escaped")
		require.Contains(t, body, "&lt;i&gt;orders&lt;/i&gt;")
		require.Contains(t, body, "&lt;b&gt;acme&lt;/b&gt;")
		require.Contains(t, body, `\u202egnp.exe`, "a bidirectional override is shown, not obeyed")

		require.NotContains(t, body, "hunter2", "the last error is scrubbed")
		require.Contains(t, body, "nats://relay:xxxxx@broker:4222")
		require.Contains(t, body, "&lt;img src=x onerror=alert(2)&gt;")
		require.NotContains(t, body, "bearer-secret-value")
		require.NotContains(t, body, "key-secret-value")
		require.Contains(t, body, "(hidden: may hold a credential)")

		require.Contains(t, body, `id="event-state">dead<`)
		require.Contains(t, body, `id="event-parked"`)
		require.Regexp(t, `id="event-attempts">1<`, body)
		require.Contains(t, body, "order.placed")
		require.Contains(t, body, "Headers (3)")
		require.Contains(t, body, `id="requeue" href="/confirm?action=requeue&amp;id=`+ids[0]+`"`)
		require.Contains(t, body, `id="discard" href="/confirm?action=discard&amp;id=`+ids[0]+`"`)

		// The dead list escapes the same fields.
		res = b.get(t, "/dead", s.send)
		require.NotContains(t, res.Body, "<script>alert")
		require.NotContains(t, res.Body, "<img src=x")
		require.NotContains(t, res.Body, "hunter2")
		require.Contains(t, res.Body, "&lt;i&gt;orders&lt;/i&gt;")
		// So does the overview, where the topic is also in a link.
		res = b.get(t, "/")
		require.NotContains(t, res.Body, "<i>orders</i>")
		require.Contains(t, res.Body, `href="dead?topic=%3ci%3eorders%3c%2fi%3e"`)
	})

	t.Run("BinaryPayloadIsAHexDumpAndLongPayloadsAreCut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "")
		bin := make([]byte, 5000)
		for i := range bin {
			bin[i] = byte(i*7 + 0x80)
		}
		bin[0], bin[1] = 0xff, '<'
		long := strings.Repeat("é", 6000) // 12000 bytes of UTF-8
		ids := b.write(t, herald.Message{Topic: "t", Payload: bin}, herald.Message{Topic: "t", Payload: []byte(long)},
			herald.Message{Topic: "t", EventVersion: 4, AggregateVersion: 12})

		res := b.get(t, "/events/"+ids[0])
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, "Payload (5000 bytes)")
		require.Contains(t, res.Body, "Not UTF-8 text: shown as a hex dump.")
		require.Contains(t, res.Body, "00000000  ff 3c ")
		require.Contains(t, res.Body, "|.&lt;", "the dump's text column is escaped too")
		require.Contains(t, res.Body, "3976 more bytes not shown")
		require.NotContains(t, res.Body, "00000400 ", "the dump stops after 1024 bytes")

		res = b.get(t, "/events/"+ids[1])
		require.Contains(t, res.Body, "Payload (12000 bytes)")
		require.Contains(t, res.Body, "3808 more bytes not shown", "cut at 8192 bytes, on a character boundary")
		require.Equal(t, 4096, strings.Count(res.Body, "é"))

		require.Contains(t, res.Body, `id="event-version">1<`)
		require.NotContains(t, res.Body, `id="aggregate-version"`, "no aggregate version, none shown")

		res = b.get(t, "/events/"+ids[2])
		require.Contains(t, res.Body, `id="payload-empty"`)
		require.Contains(t, res.Body, `id="event-version">4<`)
		require.Contains(t, res.Body, `id="aggregate-version">(version 12)<`)
		require.Contains(t, res.Body, `id="event-state">ready<`)
		require.NotContains(t, res.Body, `id="requeue"`, "only dead events are requeued")
	})

	t.Run("StaticAssetsAreServed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "")
		res := b.get(t, "/static/admin.css")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Header.Get("Content-Type"), "text/css")
		res = b.get(t, "/static/admin.js")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Header.Get("Content-Type"), "javascript")
		require.Contains(t, res.Body, "select-all")
	})

	t.Run("PagesWorkUnderAPrefix", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken, func(c *heraldui.Config) { c.Prefix = "/admin" })
		ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
		res := b.get(t, "/admin")
		require.Equal(t, http.StatusMovedPermanently, res.Code)
		require.Equal(t, "/admin/", res.Header.Get("Location"))
		res = b.get(t, "/admin/")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `href="/admin/static/admin.css"`)
		require.Contains(t, res.Body, `href="dead?topic=orders"`, "relative to the overview at /admin/")
		require.Equal(t, http.StatusOK, b.get(t, "/admin/events/"+ids[0]).Code)
		require.Equal(t, http.StatusNotFound, b.get(t, "/dead").Code, "outside the prefix")

		res = b.post(t, "/admin/login", url.Values{"token": {testToken}})
		require.Equal(t, http.StatusSeeOther, res.Code)
		require.Equal(t, "/admin/", res.Header.Get("Location"))
		require.Contains(t, res.Header.Get("Set-Cookie"), "Path=/admin/")
	})
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	s := b.login(t)
	ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
	many := url.Values{"action": {"requeue"}}
	for range 1001 {
		many.Add("id", herald.NewID())
	}
	for _, tc := range []struct {
		name, method, target string
		form                 url.Values
		code                 int
		says                 string
	}{
		{"ZeroLimit", "GET", "/dead?limit=0", nil, 400, "limit must be a number from 1 to 1000"},
		{"HugeLimit", "GET", "/dead?limit=100000000", nil, 400, "limit must be a number from 1 to 1000"},
		{"LimitNotANumber", "GET", "/dead?limit=lots", nil, 400, "limit must be a number"},
		{"SearchIDNotAUUID", "GET", "/dead?id=42%3Cb%3E", nil, 400, "is not an event id"},
		{"SearchTopicWithSpace", "GET", "/dead?topic=a+b", nil, 400, "is not a topic"},
		{"SearchTopicTooLong", "GET", "/dead?topic=" + strings.Repeat("t", 256), nil, 400, "at most 255 bytes"},
		{"SearchByBoth", "GET", "/dead?topic=orders&id=" + ids[0], nil, 400, "not both"},
		{"EventIDNotAUUID", "GET", "/events/not-a-uuid", nil, 400, "is not an event id"},
		{"UnknownEvent", "GET", "/events/" + herald.NewID(), nil, 404, "No event has the id"},
		{"UnknownRoute", "GET", "/nothing/here", nil, 404, "There is no page at /nothing/here"},
		{"UnknownStaticFile", "GET", "/static/secret.txt", nil, 404, "There is no page"},
		{"StaticDirectory", "GET", "/static/", nil, 404, "There is no page"},
		{"WrongMethod", "DELETE", "/dead", nil, 405, ""},
		{"UnknownAction", "POST", "/actions/explode", url.Values{"csrf": {s.csrf}, "confirm": {"yes"}}, 404, "There is no action"},
		{"ConfirmUnknownAction", "GET", "/confirm?action=explode&id=" + ids[0], nil, 400, "must be requeue or discard"},
		{"ConfirmNothingSelected", "GET", "/confirm?action=requeue", nil, 400, "no event is selected"},
		{"ConfirmBadID", "GET", "/confirm?action=requeue&id=nope", nil, 400, "is not an event id"},
		{"ConfirmTooManyIDs", "GET", "/confirm?" + many.Encode(), nil, 400, "select at most 1000"},
		{"ActionIDsAndTopic", "POST", "/actions/requeue", url.Values{"csrf": {s.csrf}, "confirm": {"yes"}, "topic": {"orders"}, "id": {ids[0]}}, 400, "not both"},
		{"ActionBadID", "POST", "/actions/discard", url.Values{"csrf": {s.csrf}, "confirm": {"yes"}, "id": {"<script>"}}, 400, "is not an event id"},
		{"ActionFormTooLarge", "POST", "/actions/requeue", url.Values{"csrf": {s.csrf}, "confirm": {"yes"}, "pad": {strings.Repeat("x", 300<<10)}}, 413, "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.do(t, tc.method, tc.target, tc.form, s.send)
			require.Equal(t, tc.code, res.Code, res.Body)
			if tc.says != "" {
				require.Contains(t, html.UnescapeString(res.Body), tc.says)
			}
			require.NotContains(t, res.Body, "<script>", "the bad input is escaped when quoted")
		})
	}
	require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]), "no bad request changed anything")
}

func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, testToken)
	for _, tc := range []struct{ method, target string }{
		{"GET", "/"}, {"GET", "/dead"}, {"GET", "/nothing"}, {"GET", "/static/admin.css"},
		{"GET", "/login"}, {"POST", "/actions/requeue"}, {"DELETE", "/"},
	} {
		res := b.do(t, tc.method, tc.target, url.Values{})
		csp := res.Header.Get("Content-Security-Policy")
		require.Contains(t, csp, "default-src 'none'", "%s %s", tc.method, tc.target)
		require.Contains(t, csp, "script-src 'self';", "no inline script, no other origin")
		require.Contains(t, csp, "frame-ancestors 'none'")
		require.Contains(t, csp, "form-action 'self'")
		require.NotContains(t, csp, "unsafe-inline")
		require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	}
	page := b.get(t, "/dead").Body
	require.NotRegexp(t, `<script>|<script [^>]*>[^<]`, page, "no inline script: only <script src>")
	require.NotContains(t, page, "style=", "no inline style")
	require.NotContains(t, page, "onclick")
	require.Equal(t, "no-store", b.get(t, "/").Header.Get("Cache-Control"))
}

func TestReadOnlyWithoutToken(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})

	for _, target := range []string{"/", "/dead", "/dead?topic=orders", "/events/" + ids[0]} {
		res := b.get(t, target)
		require.Equal(t, http.StatusOK, res.Code, target)
		require.Contains(t, res.Body, `id="read-only"`, target)
		require.NotContains(t, res.Body, "/confirm", "%s: no action is offered", target)
		require.NotContains(t, res.Body, `type="checkbox"`, target)
		require.NotContains(t, res.Body, `id="login-link"`, target)
	}
	for _, tc := range []struct {
		name   string
		method string
		target string
		form   url.Values
		opts   []func(*http.Request)
	}{
		{"RequeuePost", "POST", "/actions/requeue", url.Values{"confirm": {"yes"}, "id": {ids[0]}}, nil},
		{"DiscardPostWithABearerToken", "POST", "/actions/discard", url.Values{"confirm": {"yes"}, "id": {ids[0]}, "resume": {"1"}},
			[]func(*http.Request){withBearer("anything-at-all-long-enough")}},
		{"ConfirmPage", "GET", "/confirm?action=requeue&id=" + ids[0], nil, nil},
		{"LoginPage", "GET", "/login", nil, nil},
		{"LoginPost", "POST", "/login", url.Values{"token": {""}}, nil},
		{"LogoutPost", "POST", "/logout", url.Values{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.do(t, tc.method, tc.target, tc.form, tc.opts...)
			require.Equal(t, http.StatusForbidden, res.Code, res.Body)
			require.Contains(t, res.Body, "read-only")
		})
	}
	require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]))
	require.Empty(t, b.audit.String(), "nothing happened to audit")
}

func TestAuth(t *testing.T) {
	t.Parallel()

	t.Run("WithoutLoginPagesOfferALoginAndNoAction", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
		for _, target := range []string{"/", "/dead", "/events/" + ids[0]} {
			res := b.get(t, target)
			require.Equal(t, http.StatusOK, res.Code)
			require.Contains(t, res.Body, `id="login-link"`)
			require.NotContains(t, res.Body, "/confirm")
		}
		res := b.get(t, "/confirm?action=requeue&id="+ids[0])
		require.Equal(t, http.StatusUnauthorized, res.Code)
		require.Contains(t, res.Body, "Log in with the admin token first")
	})

	t.Run("ActionsRefuseAMissingOrWrongToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
		form := url.Values{"confirm": {"yes"}, "id": {ids[0]}}
		for _, tc := range []struct {
			name string
			opts []func(*http.Request)
		}{
			{"NoCredentials", nil},
			{"WrongBearer", []func(*http.Request){withBearer(testToken + "x")}},
			{"BearerPrefixOfTheToken", []func(*http.Request){withBearer(testToken[:len(testToken)-1])}},
			{"EmptyBearer", []func(*http.Request){withBearer("")}},
			{"BasicAuthScheme", []func(*http.Request){withHeader("Authorization", "Basic "+testToken)}},
			{"ForgedCookie", []func(*http.Request){withHeader("Cookie", "herald_admin_session=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA.AAAA")}},
			{"TokenAsCookie", []func(*http.Request){withHeader("Cookie", "herald_admin_session="+testToken)}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := b.post(t, "/actions/requeue", form, tc.opts...)
				require.Equal(t, http.StatusUnauthorized, res.Code, res.Body)
				require.Equal(t, `Bearer realm="herald"`, res.Header.Get("WWW-Authenticate"))
			})
		}
		require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]))

		res := b.post(t, "/actions/requeue", form, withBearer(testToken))
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Requeued 1 dead event")
		require.Equal(t, heraldadmin.StateReady, b.state(t, ids[0]))

		lines := b.auditLines(t)
		failed := 0
		for _, l := range lines {
			if l["action"] == "login_failed" {
				failed++
				require.Equal(t, "bearer", l["method"])
			}
		}
		require.Equal(t, 4, failed, "every wrong bearer token is audited")
		require.NotContains(t, b.audit.String(), testToken[:10], "no token in the audit log")
	})

	t.Run("WrongLoginIsRefusedWithoutASession", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		res := b.get(t, "/login")
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `type="password"`)
		res = b.post(t, "/login", url.Values{"token": {"not-the-token-at-all"}})
		require.Equal(t, http.StatusUnauthorized, res.Code)
		require.Contains(t, res.Body, `id="login-error"`)
		require.Empty(t, res.Header.Values("Set-Cookie"))
		lines := b.auditLines(t)
		require.Len(t, lines, 1)
		require.Equal(t, "login_failed", lines[0]["action"])
		require.Equal(t, "192.0.2.1:1234", lines[0]["remote_addr"])
	})

	t.Run("LoginGivesASessionAndLogoutEndsIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
		s := b.login(t)
		res := b.get(t, "/events/"+ids[0], s.send)
		require.Contains(t, res.Body, `id="requeue"`)
		require.NotContains(t, res.Body, `id="login-link"`)
		require.Equal(t, http.StatusOK, b.get(t, "/confirm?action=requeue&id="+ids[0], s.send).Code)

		other := b.login(t)
		res = b.post(t, "/logout", url.Values{"csrf": {s.csrf}}, s.send)
		require.Equal(t, http.StatusSeeOther, res.Code)
		require.Contains(t, res.Header.Get("Set-Cookie"), "Max-Age=0")
		// The session ended on the server: a copy of its cookie, replayed,
		// is no login, for pages, confirmations or actions.
		res = b.get(t, "/events/"+ids[0], s.send)
		require.Contains(t, res.Body, `id="login-link"`)
		require.NotContains(t, res.Body, `id="requeue"`)
		require.Equal(t, http.StatusUnauthorized, b.get(t, "/confirm?action=requeue&id="+ids[0], s.send).Code)
		res = b.post(t, "/actions/requeue", url.Values{"confirm": {"yes"}, "id": {ids[0]}, "csrf": {s.csrf}}, s.send)
		require.Equal(t, http.StatusUnauthorized, res.Code, res.Body)
		require.Equal(t, http.StatusUnauthorized, b.post(t, "/logout", url.Values{"csrf": {s.csrf}}, s.send).Code)
		require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]))
		// Another login goes on; the next one gets a new session, with a
		// new CSRF token.
		require.Equal(t, http.StatusOK, b.get(t, "/confirm?action=requeue&id="+ids[0], other.send).Code)
		s2 := b.login(t)
		require.NotEqual(t, s.cookie.Value, s2.cookie.Value)
		require.NotEqual(t, s.csrf, s2.csrf)
	})

	t.Run("SessionPostsNeedTheirCSRFTokenAndTheSameOrigin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
		s := b.login(t)
		other := b.login(t)
		require.NotEqual(t, s.csrf, other.csrf)
		form := func(csrf string) url.Values {
			return url.Values{"confirm": {"yes"}, "id": {ids[0]}, "csrf": {csrf}}
		}
		for _, tc := range []struct {
			name string
			form url.Values
			opts []func(*http.Request)
			says string
		}{
			{"NoCSRFToken", url.Values{"confirm": {"yes"}, "id": {ids[0]}}, nil, "CSRF token is missing or wrong"},
			{"WrongCSRFToken", form(s.csrf[:len(s.csrf)-2] + "AA"), nil, "CSRF token is missing or wrong"},
			{"AnotherSessionsCSRFToken", form(other.csrf), nil, "CSRF token is missing or wrong"},
			{"CrossOriginPost", form(s.csrf), []func(*http.Request){withHeader("Origin", "http://attacker.invalid")}, "Cross-origin requests are refused"},
			{"CrossSiteFetch", form(s.csrf), []func(*http.Request){withHeader("Sec-Fetch-Site", "cross-site")}, "Cross-origin requests are refused"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := b.post(t, "/actions/requeue", tc.form, append([]func(*http.Request){s.send}, tc.opts...)...)
				require.Equal(t, http.StatusForbidden, res.Code, res.Body)
				require.Contains(t, res.Body, tc.says)
			})
		}
		require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]))
		res := b.post(t, "/actions/requeue", form(s.csrf), s.send, withHeader("Origin", "http://example.com"),
			withHeader("Sec-Fetch-Site", "same-origin"))
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Equal(t, heraldadmin.StateReady, b.state(t, ids[0]))
	})

	t.Run("AnExpiredOrTamperedSessionIsNoLogin", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		s := b.login(t)
		body, sig, ok := strings.Cut(s.cookie.Value, ".")
		require.True(t, ok)
		// Flip a byte of the expiry: the signature no longer matches.
		raw := []byte(body)
		raw[len(raw)-2] ^= 1
		tampered := &http.Cookie{Name: s.cookie.Name, Value: string(raw) + "." + sig}
		res := b.get(t, "/confirm?action=requeue&id="+herald.NewID(), func(r *http.Request) { r.AddCookie(tampered) })
		require.Equal(t, http.StatusUnauthorized, res.Code)
		// A session of another handler (another relay process, or before a
		// restart) is no login either.
		b2 := setup(t, testToken)
		res = b2.get(t, "/confirm?action=requeue&id="+herald.NewID(), s.send)
		require.Equal(t, http.StatusUnauthorized, res.Code)
	})
}

func TestActions(t *testing.T) {
	t.Parallel()

	t.Run("RequeueGoesThroughTheConfirmationPage", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, false, "broker down", herald.Message{Topic: "orders"}, herald.Message{Topic: "orders"})
		s := b.login(t)

		list := b.get(t, "/dead", s.send)
		require.Contains(t, list.Body, `<input type="checkbox" name="id" value="`+ids[0]+`"`)
		require.Contains(t, list.Body, `<form method="get" action="/confirm" id="bulk">`)

		// What the list's form sends for one ticked event.
		res := b.get(t, "/confirm?action=requeue&id="+ids[0], s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, "Requeue 1 dead event?")
		require.Contains(t, res.Body, `href="/events/`+ids[0]+`"`)
		require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]), "the confirmation page changes nothing")

		form := formOf(t, res.Body, "confirm-form")
		require.Equal(t, "/actions/requeue", form.action)
		require.Equal(t, []string{ids[0]}, form.values["id"])
		require.Equal(t, "yes", form.values.Get("confirm"))
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Requeued 1 dead event")
		require.Equal(t, heraldadmin.StateReady, b.state(t, ids[0]))
		require.Equal(t, heraldadmin.StateDead, b.state(t, ids[1]), "only the selected event")

		lines := b.auditLines(t)
		last := lines[len(lines)-1]
		require.Equal(t, "admin action", last["msg"])
		require.Equal(t, "requeue", last["action"])
		require.Equal(t, "192.0.2.1:1234", last["remote_addr"])
		require.Equal(t, "session", last["method"])
		require.Equal(t, []any{ids[0]}, last["ids"])
		require.InDelta(t, 1, last["changed"], 0)
		require.Equal(t, "done", last["outcome"])
	})

	t.Run("AnUnconfirmedPostChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		ids := b.kill(t, false, "x", herald.Message{Topic: "orders"})
		res := b.post(t, "/actions/discard", url.Values{"id": {ids[0]}}, withBearer(testToken))
		require.Equal(t, http.StatusBadRequest, res.Code)
		require.Contains(t, res.Body, "was not confirmed")
		// A selection in the URL's query is not the form's.
		res = b.post(t, "/actions/discard?id="+ids[0], url.Values{"confirm": {"yes"}}, withBearer(testToken))
		require.Equal(t, http.StatusBadRequest, res.Code)
		require.Contains(t, res.Body, "no event is selected")
		require.Equal(t, heraldadmin.StateDead, b.state(t, ids[0]))
	})

	t.Run("BulkActionsBySelectedIDsAndByTopic", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		orders := b.kill(t, false, "x", herald.Message{Topic: "orders"}, herald.Message{Topic: "orders"}, herald.Message{Topic: "orders"})
		payments := b.kill(t, false, "x", herald.Message{Topic: "payments"}, herald.Message{Topic: "payments"})
		ready := b.write(t, herald.Message{Topic: "payments"})
		s := b.login(t)

		list := b.get(t, "/dead?topic=orders", s.send)
		require.Contains(t, list.Body, `id="requeue-topic"`)
		res := b.get(t, "/confirm?action=requeue&topic=orders", s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, "Requeue 3 dead events?")
		form := formOf(t, res.Body, "confirm-form")
		require.Equal(t, "orders", form.values.Get("topic"))
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Requeued 3 dead events")
		for _, id := range orders {
			require.Equal(t, heraldadmin.StateReady, b.state(t, id))
		}
		require.Equal(t, heraldadmin.StateDead, b.state(t, payments[0]), "another topic is left alone")

		// Two selected ids, one of them not dead.
		q := url.Values{"action": {"discard"}, "id": {payments[0], ready[0], payments[0]}}
		res = b.get(t, "/confirm?"+q.Encode(), s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, "Discard 1 dead event?")
		require.Contains(t, res.Body, "2 selected events, of which 1 is dead")
		require.Contains(t, res.Body, `id="not-dead"`)
		form = formOf(t, res.Body, "confirm-form")
		require.Equal(t, []string{payments[0], ready[0]}, form.values["id"], "duplicates dropped")
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Discarded 1 dead event")
		require.Contains(t, res.Body, "1 of the events selected was not dead")
		require.Equal(t, "gone", string(b.state(t, payments[0])))
		require.Equal(t, heraldadmin.StateReady, b.state(t, ready[0]), "a ready event is never discarded")
		require.Equal(t, heraldadmin.StateDead, b.state(t, payments[1]))

		lines := b.auditLines(t)
		byAction := map[string]map[string]any{}
		for _, l := range lines {
			byAction[l["action"].(string)] = l
		}
		require.Equal(t, "orders", byAction["requeue"]["topic"])
		require.InDelta(t, 3, byAction["requeue"]["changed"], 0)
		require.Equal(t, []any{payments[0], ready[0]}, byAction["discard"]["ids"])
		require.Equal(t, false, byAction["discard"]["resume"])
		require.InDelta(t, 1, byAction["discard"]["changed"], 0)
	})

	t.Run("DiscardingAParkingEventNeedsTheResumeChoice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		dead := b.kill(t, true, "x", herald.Message{Topic: "orders", Key: "order-7"})
		waiting := b.write(t, herald.Message{Topic: "orders", Key: "order-7"})
		s := b.login(t)

		res := b.get(t, "/confirm?action=discard&id="+dead[0], s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, `id="parked-choice"`)
		require.Contains(t, res.Body, "1 of these events parks its key")
		require.Regexp(t, `(?s)id="confirm-parked".*order-7.*<td class="num">1</td>`, res.Body, "the key and its one waiting event")
		require.Contains(t, res.Body, `<input type="checkbox" name="resume" value="1" id="resume">`, "unticked by default")
		require.Contains(t, res.Body, `href="/confirm?action=requeue&amp;id=`+dead[0]+`"`, "requeueing is offered instead")

		// Confirmed without ticking resume: refused, and said so.
		form := formOf(t, res.Body, "confirm-form")
		require.Empty(t, form.values.Get("resume"))
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusConflict, res.Code, res.Body)
		require.Contains(t, res.Body, "Nothing was discarded")
		require.Contains(t, res.Body, `id="parked-error"`)
		require.Regexp(t, `(?s)id="parked-keys".*order-7.*`+dead[0], res.Body)
		require.Equal(t, heraldadmin.StateDead, b.state(t, dead[0]))
		lines := b.auditLines(t)
		last := lines[len(lines)-1]
		require.Equal(t, "discard", last["action"])
		require.Equal(t, "refused: parks a key", last["outcome"])
		require.InDelta(t, 0, last["changed"], 0)

		// The 409 page's own form is the explicit choice.
		form = formOf(t, res.Body, "resume-form")
		require.Equal(t, "1", form.values.Get("resume"))
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Discarded 1 dead event")
		require.Equal(t, "gone", string(b.state(t, dead[0])))
		require.Equal(t, heraldadmin.StateReady, b.state(t, waiting[0]))
		keys, err := b.store.BlockedKeys(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, keys, "the key goes on")
		lines = b.auditLines(t)
		last = lines[len(lines)-1]
		require.Equal(t, true, last["resume"])
		require.Equal(t, "done", last["outcome"])
	})

	t.Run("DiscardingAParkingEventWithNothingWaitingAsksNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		dead := b.kill(t, true, "x", herald.Message{Topic: "orders", Key: "order-8"})
		s := b.login(t)
		res := b.get(t, "/confirm?action=discard&id="+dead[0], s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.NotContains(t, res.Body, `id="parked-choice"`)
		require.Contains(t, res.Body, "1 of these events parks its key, with no event waiting behind: discarding it resumes the key.")
		form := formOf(t, res.Body, "confirm-form")
		require.Empty(t, form.values.Get("resume"))
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Discarded 1 dead event")
		keys, err := b.store.BlockedKeys(t.Context(), 10)
		require.NoError(t, err)
		require.Empty(t, keys, "nothing is parked any more")
	})

	t.Run("DiscardingATopicWithAParkedKeyAsksToo", func(t *testing.T) {
		t.Parallel()
		b := setup(t, testToken)
		b.kill(t, true, "x", herald.Message{Topic: "orders", Key: "k1"})
		b.write(t, herald.Message{Topic: "orders", Key: "k1"}) // waits behind it
		plain := b.kill(t, false, "x", herald.Message{Topic: "orders", Key: "k2"})
		s := b.login(t)
		res := b.get(t, "/confirm?action=discard&topic=orders", s.send)
		require.Equal(t, http.StatusOK, res.Code)
		require.Contains(t, res.Body, "Discard 2 dead events?")
		require.Contains(t, res.Body, `id="parked-choice"`)
		form := formOf(t, res.Body, "confirm-form")
		form.values.Set("resume", "1") // the operator ticks the box
		res = b.post(t, form.action, form.values, s.send)
		require.Equal(t, http.StatusOK, res.Code, res.Body)
		require.Contains(t, res.Body, "Discarded 2 dead events")
		require.Equal(t, "gone", string(b.state(t, plain[0])))
	})

	t.Run("StoreErrorsAreShownScrubbed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "", func(c *heraldui.Config) {
			c.Admin = &fakeAdmin{BacklogFunc: func(context.Context) ([]heraldadmin.TopicBacklog, error) {
				return nil, errors.New("heraldpg: connecting to postgres://herald:pa55word@db.internal/outbox: <b>refused</b>")
			}}
		})
		res := b.get(t, "/")
		require.Equal(t, http.StatusInternalServerError, res.Code)
		require.Contains(t, res.Body, "Failed while reading the backlog")
		require.Contains(t, res.Body, "postgres://herald:xxxxx@db.internal")
		require.Contains(t, res.Body, "&lt;b&gt;refused&lt;/b&gt;")
		require.NotContains(t, res.Body, "pa55word")
		require.Contains(t, b.logs.String(), "reading the backlog")
		require.NotContains(t, b.logs.String(), "pa55word")

		b = setup(t, "", func(c *heraldui.Config) {
			c.Admin = &fakeAdmin{BacklogFunc: func(ctx context.Context) ([]heraldadmin.TopicBacklog, error) {
				return nil, fmt.Errorf("querying: %w", context.DeadlineExceeded)
			}}
		})
		res = b.get(t, "/")
		require.Equal(t, http.StatusGatewayTimeout, res.Code)
	})
}

// form is an HTML form read off a page.
type form struct {
	action string
	values url.Values
}

var (
	formTag    = regexp.MustCompile(`<form method="post" action="([^"]+)"[^>]*id="([^"]+)">`)
	hiddenTag  = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)
	formEndTag = "</form>"
)

// formOf reads the post form with the given id and its hidden fields, as a
// browser would submit it with no box ticked.
func formOf(t *testing.T, page, id string) form {
	t.Helper()
	for _, m := range formTag.FindAllStringSubmatchIndex(page, -1) {
		if page[m[4]:m[5]] != id {
			continue
		}
		rest := page[m[1]:]
		rest = rest[:strings.Index(rest, formEndTag)]
		f := form{action: html.UnescapeString(page[m[2]:m[3]]), values: url.Values{}}
		for _, h := range hiddenTag.FindAllStringSubmatch(rest, -1) {
			f.values.Add(html.UnescapeString(h[1]), html.UnescapeString(h[2]))
		}
		return f
	}
	t.Fatalf("no form %q on the page:\n%s", id, page)
	return form{}
}

// fakeClock is a time the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func from(remoteAddr string) func(*http.Request) {
	return func(r *http.Request) { r.RemoteAddr = remoteAddr }
}

func TestTriesAtTheTokenAreLimited(t *testing.T) {
	t.Parallel()
	setupLimited := func(t *testing.T) (*bundle, *fakeClock) {
		b := setup(t, testToken)
		clock := &fakeClock{now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
		heraldui.SetClock(b.ui, clock.Now)
		return b, clock
	}
	wrong := url.Values{"token": {"not-the-token-at-all"}}
	right := url.Values{"token": {testToken}}
	const attacker, operator = "203.0.113.7:40000", "198.51.100.2:50000"

	t.Run("ABurstOfWrongTokensGets429UntilTheLimitRecovers", func(t *testing.T) {
		t.Parallel()
		b, clock := setupLimited(t)
		for i := range 5 {
			res := b.post(t, "/login", wrong, from(attacker))
			require.Equal(t, http.StatusUnauthorized, res.Code, "try %d", i+1)
		}
		res := b.post(t, "/login", wrong, from(attacker))
		require.Equal(t, http.StatusTooManyRequests, res.Code)
		require.Equal(t, "12", res.Header.Get("Retry-After"))
		require.Contains(t, res.Body, "Too many wrong tokens: try again in 12 seconds")
		// Refused without looking at the token: the right one does not get
		// in from there either, nor tells whether it is right.
		res = b.post(t, "/login", right, from(attacker))
		require.Equal(t, http.StatusTooManyRequests, res.Code)
		require.Empty(t, res.Header.Values("Set-Cookie"))
		res = b.get(t, "/", from(attacker), withBearer(testToken))
		require.Equal(t, http.StatusTooManyRequests, res.Code)
		require.NotContains(t, res.Body, "bearer token")
		// Another port of the same address is the same client.
		require.Equal(t, http.StatusTooManyRequests, b.post(t, "/login", wrong, from("203.0.113.7:40001")).Code)

		// The operator, elsewhere, logs in.
		res = b.post(t, "/login", right, from(operator))
		require.Equal(t, http.StatusSeeOther, res.Code, res.Body)

		// One try comes back every 12 seconds, up to five.
		clock.Advance(11 * time.Second)
		res = b.post(t, "/login", wrong, from(attacker))
		require.Equal(t, http.StatusTooManyRequests, res.Code)
		require.Equal(t, "1", res.Header.Get("Retry-After"))
		clock.Advance(time.Second)
		require.Equal(t, http.StatusUnauthorized, b.post(t, "/login", wrong, from(attacker)).Code)
		require.Equal(t, http.StatusTooManyRequests, b.post(t, "/login", wrong, from(attacker)).Code)
		clock.Advance(time.Minute)
		for range 5 {
			require.Equal(t, http.StatusUnauthorized, b.post(t, "/login", wrong, from(attacker)).Code)
		}
		require.Equal(t, http.StatusTooManyRequests, b.post(t, "/login", wrong, from(attacker)).Code)
		clock.Advance(time.Minute)
		require.Equal(t, http.StatusSeeOther, b.post(t, "/login", right, from(attacker)).Code)

		throttled := 0
		for _, l := range b.auditLines(t) {
			if l["action"] == "login_throttled" {
				throttled++
				require.Equal(t, attacker, l["remote_addr"])
			}
		}
		require.Equal(t, 3, throttled, "one audit line each time the tries ran out")
	})

	t.Run("WrongBearerTokensSpendTheSameTries", func(t *testing.T) {
		t.Parallel()
		b, _ := setupLimited(t)
		for range 3 {
			require.Equal(t, http.StatusOK, b.get(t, "/", from(attacker), withBearer(testToken+"x")).Code)
		}
		for range 2 {
			res := b.post(t, "/actions/requeue", url.Values{"confirm": {"yes"}, "id": {herald.NewID()}}, from(attacker), withBearer("guess"))
			require.Equal(t, http.StatusUnauthorized, res.Code)
		}
		res := b.post(t, "/login", wrong, from(attacker))
		require.Equal(t, http.StatusTooManyRequests, res.Code)
		// A right bearer from elsewhere works.
		require.Contains(t, b.get(t, "/", from(operator), withBearer(testToken)).Body, "bearer token")
	})

	t.Run("ManyClientsCanOnlyExhaustTheGlobalLimit", func(t *testing.T) {
		t.Parallel()
		b, clock := setupLimited(t)
		// 30 wrong tokens from 30 addresses, each under its own limit.
		for i := range 30 {
			res := b.post(t, "/login", wrong, from(fmt.Sprintf("203.0.113.%d:1000", i+1)))
			require.Equal(t, http.StatusUnauthorized, res.Code, "client %d", i+1)
		}
		res := b.post(t, "/login", right, from(operator))
		require.Equal(t, http.StatusTooManyRequests, res.Code, "every try of the minute is spent")
		require.Equal(t, "2", res.Header.Get("Retry-After"))
		clock.Advance(2 * time.Second)
		require.Equal(t, http.StatusSeeOther, b.post(t, "/login", right, from(operator)).Code)
		// A right token spends nothing.
		require.Equal(t, http.StatusSeeOther, b.post(t, "/login", right, from(operator)).Code)
	})
}
