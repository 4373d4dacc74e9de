package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The admin page of a running relay: the charts count what the relay
// publishes, a replay from the page goes out through the relay's own
// destination (the same work as herald replay), and when the destination
// goes down the page shows the outage beside the backlog it holds.
func TestRelayAdminPageReplaysAndShowsTheOutage(t *testing.T) {
	t.Parallel()
	d := setup(t)
	const token = "page-admin-token-0042-xyz"
	ns := testenv.NATS(t)
	ns.CreateStream(t, "PAGE", "orders.>")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, map[string]string{"HERALD_ADMIN_TOKEN": token}, nil, append([]string{"relay", "--publisher", ns.URL(),
			"--admin-addr", addr, "--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/readyz")
		return err == nil && code == 200 && strings.Contains(body, `"ready":true`)
	}, 30*time.Second, 10*time.Millisecond)

	call := func(method, path string, form url.Values) (int, map[string]any) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(t.Context(), method, "http://"+addr+path, body)
		require.NoError(t, err)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(res.Body).Decode(&out))
		return res.StatusCode, out
	}

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) SELECT 'orders.placed', 'k' || i, 'x' FROM generate_series(1, 3) i`)
	require.Eventually(t, func() bool { return len(streamMessages(t, ns, "PAGE")) == 3 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		_, v := call("GET", "/", nil)
		totals := v["totals"].(map[string]any)
		return totals["ready"] == 0.0 && totals["claimed"] == 0.0 && len(v["charts"].([]any)) == 3
	}, 30*time.Second, 20*time.Millisecond)

	// Count, then replay, through the relay's destination.
	form := url.Values{"topic": {"orders.placed"}, "rate": {"50"}}
	code, counted := call("POST", "/replay/count", form)
	require.Equal(t, 200, code, counted)
	require.InDelta(t, 3, counted["events"], 0)
	require.Equal(t, map[string]any{"default": 3.0}, counted["by_destination"])
	require.Len(t, streamMessages(t, ns, "PAGE"), 3, "counting publishes nothing")
	code, refused := call("POST", "/replay/run", form)
	require.Equal(t, 400, code, "a replay needs its confirmation")
	require.Contains(t, refused["error"], "not confirmed")
	form.Set("confirm", "yes")
	form.Set("new_ids", "1") // JetStream would drop the same ids within its deduplication window
	code, replayed := call("POST", "/replay/run", form)
	require.Equal(t, 200, code, replayed)
	require.InDelta(t, 3, replayed["events"], 0)
	msgs := streamMessages(t, ns, "PAGE")
	require.Len(t, msgs, 6)
	for i := range 3 {
		require.Equal(t, string(msgs[i].Data), string(msgs[i+3].Data), "replayed in order")
		require.NotEqual(t, msgs[i].Header.Get(herald.HeaderID), msgs[i+3].Header.Get(herald.HeaderID), "under new ids")
	}

	// The destination goes down: the outage and the events it holds.
	ns.Stop()
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'late', 'x'), ('orders.placed', 'later', 'x')`)
	var v map[string]any
	require.Eventually(t, func() bool {
		_, v = call("GET", "/", nil)
		outages, _ := v["outages"].([]any)
		return len(outages) == 1
	}, 30*time.Second, 20*time.Millisecond)
	outage := v["outages"].([]any)[0].(map[string]any)
	totals := v["totals"].(map[string]any)
	require.Equal(t, "default", outage["destination"])
	require.Equal(t, "open", outage["breaker"])
	require.NotEmpty(t, outage["last_error"])
	require.Equal(t, totals["ready"], outage["waiting"], "the events the outage holds are the backlog's ready ones")
	require.Equal(t, totals["ready"], totals["waiting_for_down_destinations"])
	dests := v["destinations"].([]any)
	require.Len(t, dests, 1)
	require.Equal(t, "open", dests[0].(map[string]any)["state"])
	_, body, err := get(addr, "/destinations")
	require.NoError(t, err)
	var dj destinationsJSON
	require.NoError(t, json.Unmarshal([]byte(body), &dj))
	require.Len(t, dj.Destinations, 1)
	require.Equal(t, "open", dj.Destinations[0].Breaker)
	require.NotEmpty(t, dj.Destinations[0].LastError, "/destinations says why the destination is down: %s", body)

	cancel()
	r := <-done
	require.Contains(t, r.stderr, `msg="admin action"`)
	require.Contains(t, r.stderr, "action=replay ")
	require.NotContains(t, r.stderr+r.stdout, token)
}
