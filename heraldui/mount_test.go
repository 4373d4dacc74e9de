package heraldui_test

import (
	"crypto/subtle"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
)

// serviceKey is the credential of the service that mounts the page in the
// mount test: a bearer key of its own, in the Authorization header the
// page's own login would read.
const serviceKey = "the-services-own-operator-key"

// linkAttr is a link, an asset or a form target on a page.
var linkAttr = regexp.MustCompile(`\s(href|src|action)="([^"]*)"`)

// TestMountedInAServiceMux mounts the page as a service does: under a
// prefix of its own in a plain ServeMux, next to its own routes, behind
// its own authentication middleware, with the page's own login off.
func TestMountedInAServiceMux(t *testing.T) {
	t.Parallel()
	b := setup(t, "", func(c *heraldui.Config) {
		c.Prefix = "/herald"
		c.ExternalAuth = true
		c.DestinationOf = func(string) string { return "kafka" }
		c.Destinations = func() []string { return []string{"kafka"} }
	})
	// The service's middleware: it alone decides who gets in, and counts
	// what it lets through to the page.
	var reached atomic.Int64
	operatorsOnly := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+serviceKey)) != 1 {
				http.Error(w, "the service's login is required", http.StatusUnauthorized)
				return
			}
			reached.Add(1)
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "order "+r.PathValue("id"))
	})
	mux.Handle("/herald/", operatorsOnly(b.ui))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	dead := b.kill(t, false, "broker said no", herald.Message{Topic: "orders", Key: "order-7"})[0]
	b.write(t, herald.Message{Topic: "orders", Key: "order-8"})

	type result struct {
		code     int
		body     string
		location string
	}
	send := func(method, target string, form url.Values, credential string, headers ...string) result {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+target, body)
		require.NoError(t, err)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if credential != "" {
			req.Header.Set("Authorization", "Bearer "+credential)
		}
		for i := 0; i+1 < len(headers); i += 2 {
			req.Header.Set(headers[i], headers[i+1])
		}
		// Redirects are the page's answers, to be checked, not followed.
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return result{code: res.StatusCode, body: string(raw), location: res.Header.Get("Location")}
	}

	t.Run("TheServicesMiddlewareGuardsEveryPageAssetAndAction", func(t *testing.T) {
		for _, credential := range []string{"", "not-the-service-key", testToken} {
			for _, tc := range []struct {
				method, target string
				form           url.Values
			}{
				{"GET", "/herald/", nil},
				{"GET", "/herald/dead", nil},
				{"GET", "/herald/events/" + dead, nil},
				{"GET", "/herald/static/admin.js", nil},
				{"GET", "/herald/confirm?action=requeue&id=" + dead, nil},
				{"POST", "/herald/actions/requeue", url.Values{"confirm": {"yes"}, "id": {dead}}},
				{"POST", "/herald/pauses/pause", url.Values{"kind": {"topic"}, "name": {"orders"}}},
			} {
				res := send(tc.method, tc.target, tc.form, credential)
				require.Equal(t, http.StatusUnauthorized, res.code, "%s %s with %q", tc.method, tc.target, credential)
				require.Contains(t, res.body, "the service's login is required", "refused by the service's middleware")
			}
		}
		require.Zero(t, reached.Load(), "no request without the service's credential reached the page")
		require.Equal(t, heraldadmin.StateDead, b.state(t, dead))
		require.Empty(t, b.audit.String())
		require.Equal(t, "order 42", send("GET", "/orders/42", nil, "").body, "the service's own routes are its own")
	})

	t.Run("EveryLinkAndAssetStaysUnderThePrefix", func(t *testing.T) {
		pages := []string{"/herald/", "/herald/dead", "/herald/events/" + dead, "/herald/retrying",
			"/herald/confirm?action=requeue&id=" + dead}
		seen := map[string]bool{}
		for _, page := range pages {
			res := send("GET", page, nil, serviceKey)
			require.Equal(t, http.StatusOK, res.code, "%s: %s", page, res.body)
			require.NotContains(t, res.body, `id="login-link"`, "%s: no login of the page's own", page)
			require.NotContains(t, res.body, `id="logout"`, page)
			require.NotContains(t, res.body, `id="read-only"`, page)
			base, err := url.Parse(page)
			require.NoError(t, err)
			for _, m := range linkAttr.FindAllStringSubmatch(res.body, -1) {
				ref, err := url.Parse(html.UnescapeString(m[2]))
				require.NoError(t, err, m[0])
				target := base.ResolveReference(ref)
				require.Empty(t, target.Host, "%s: %s leaves the service", page, m[0])
				require.Truef(t, strings.HasPrefix(target.Path, "/herald/"), "%s: %s resolves to %s, outside the prefix", page, m[0], target)
				if m[1] != "action" { // a form's target is posted to, below
					seen[target.RequestURI()] = true
				}
			}
		}
		for _, want := range []string{"/herald/static/admin.css", "/herald/static/admin.js", "/herald/dead?topic=orders",
			"/herald/events/" + dead, "/herald/confirm?action=requeue&id=" + dead} {
			require.True(t, seen[want], "the pages link %s: %v", want, seen)
		}
		for target := range seen {
			require.Equal(t, http.StatusOK, send("GET", target, nil, serviceKey).code, target)
		}
		res := send("GET", "/herald/", nil, serviceKey, "Accept", "application/json")
		require.Equal(t, http.StatusOK, res.code)
		require.Contains(t, res.body, `"ready":1`, "the overview's JSON, which the script refreshes from")
	})

	t.Run("ActionsWorkWithTheServicesCredentialAlone", func(t *testing.T) {
		page := send("GET", "/herald/confirm?action=requeue&id="+dead, nil, serviceKey)
		require.Equal(t, http.StatusOK, page.code, page.body)
		confirm := formOf(t, page.body, "confirm-form")
		require.Equal(t, "/herald/actions/requeue", confirm.action)
		res := send("POST", confirm.action, confirm.values, serviceKey)
		require.Equal(t, http.StatusOK, res.code, res.body)
		require.Contains(t, res.body, "Requeued 1 dead event")
		require.Equal(t, heraldadmin.StateReady, b.state(t, dead))

		overview := send("GET", "/herald/", nil, serviceKey)
		pause := formOf(t, overview.body, "pause-form")
		require.Equal(t, "/herald/pauses/pause", pause.action)
		pause.values.Set("kind", "topic")
		pause.values.Set("name", "orders")
		res = send("POST", pause.action, pause.values, serviceKey)
		require.Equal(t, http.StatusSeeOther, res.code, res.body)
		require.True(t, strings.HasPrefix(res.location, "/herald/#"), "back to the overview, under the prefix: %s", res.location)
		ps, err := b.store.Pauses(t.Context())
		require.NoError(t, err)
		require.Len(t, ps, 1)
		require.Equal(t, "orders", ps[0].Name)

		lines := b.auditLines(t)
		require.Len(t, lines, 2)
		require.Equal(t, "requeue", lines[0]["action"])
		require.Equal(t, "external", lines[0]["method"], "the audit says the service let the operator in")
		require.Equal(t, "pause", lines[1]["action"])
		require.Equal(t, "external", lines[1]["method"])
	})

	t.Run("ThePageHasNoLoginOfItsOwn", func(t *testing.T) {
		res := send("GET", "/herald/login", nil, serviceKey)
		require.Equal(t, http.StatusNotFound, res.code)
		require.Contains(t, res.body, "no login of its own")
		res = send("POST", "/herald/login", url.Values{"token": {testToken}}, serviceKey)
		require.Equal(t, http.StatusNotFound, res.code)
		require.Equal(t, http.StatusNotFound, send("POST", "/herald/logout", url.Values{}, serviceKey).code)
	})

	t.Run("CrossOriginPostsAreRefusedStill", func(t *testing.T) {
		form := url.Values{"kind": {"topic"}, "name": {"payments"}}
		res := send("POST", "/herald/pauses/pause", form, serviceKey, "Origin", "http://attacker.invalid")
		require.Equal(t, http.StatusForbidden, res.code, res.body)
		res = send("POST", "/herald/pauses/pause", form, serviceKey, "Sec-Fetch-Site", "cross-site")
		require.Equal(t, http.StatusForbidden, res.code, res.body)
		ps, err := b.store.Pauses(t.Context())
		require.NoError(t, err)
		require.Len(t, ps, 1, "only the pause above")
	})
}
