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

	"github.com/herald-outbox/herald/internal/testenv"
)

// freeAddr is an address for a server the test starts: see
// testenv.FreeAddr for why not port 0's.
func freeAddr(t *testing.T) string {
	t.Helper()
	return testenv.FreeAddr(t)
}

func get(addr, path string) (int, string, error) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The admin server of herald relay: health, readiness that follows the
// destination, metrics; and a canary password in the DSN shows up in none
// of them, nor in the logs.
func TestRelayAdminServer(t *testing.T) {
	t.Parallel()
	d := setup(t)
	const canary = "canary-Pw-7731"
	const adminToken = "canary-admin-token-0042"
	dsn := testenv.PostgresDSN(t)
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" && u.User != nil {
		// Trust authentication takes any password: the canary rides along.
		u.User = url.UserPassword(u.User.Username(), canary)
		dsn = u.String()
	}
	flags := []string{"--db", dsn, "--schema", d.schema}
	ns := testenv.NATS(t)
	ns.CreateStream(t, "ADMIN", "orders.>")
	addr := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, map[string]string{"HERALD_ADMIN_TOKEN": adminToken}, nil, append([]string{"relay", "--publisher", ns.URL(), "--admin-addr", addr,
			"--log-format", "json", "--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, flags...)...)
	}()
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/readyz")
		return err == nil && code == 200 && strings.Contains(body, `"ready":true`)
	}, 30*time.Second, 10*time.Millisecond)
	code, body, err := get(addr, "/healthz")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Equal(t, "ok\n", body)
	code, page, err := get(addr, "/")
	require.NoError(t, err)
	require.Equal(t, 200, code)
	require.Contains(t, page, "Overview", "the admin page is served")

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) SELECT 'orders.placed', 'k' || i, 'x' FROM generate_series(1, 20) i`)
	var metrics string
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/metrics")
		metrics = body
		return err == nil && code == 200 && strings.Contains(body, `herald_published_total{destination="default",topic="orders.placed"} 20`)
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, metrics, "herald_relay_up 1")
	require.Contains(t, metrics, `herald_destination_breaker{destination="default",state="closed"} 1`,
		"one destination without routes has a breaker metric too")
	require.Regexp(t, `herald_destination_publish_seconds_count\{destination="default"\} [1-9]`, metrics)
	require.Contains(t, metrics, "herald_claim_batch_size_count")
	// The outbox table's size (heraldpgprom), plain here.
	require.Regexp(t, `herald_outbox_relation_bytes\{kind="table",relation="herald_outbox"\} [1-9]`, metrics)
	require.Contains(t, metrics, "herald_outbox_table_stats_up 1")

	// The broker goes away: not ready, and it says why.
	ns.Stop()
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'late', 'x')`)
	var ready string
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/readyz")
		ready = body
		return err == nil && code == 503
	}, 30*time.Second, 20*time.Millisecond)
	var rj readyJSON
	require.NoError(t, json.Unmarshal([]byte(ready), &rj))
	require.False(t, rj.Ready)
	require.NotEmpty(t, rj.Destination)
	// The backlog figures are read at most every 10s: the waiting event
	// shows once the next read comes.
	require.Eventually(t, func() bool {
		_, body, err := get(addr, "/metrics")
		metrics = body
		return err == nil && strings.Contains(body, `herald_pending_events{topic="orders.placed"}`)
	}, 30*time.Second, 100*time.Millisecond)
	require.Contains(t, metrics, `herald_destination_breaker{destination="default",state="open"} 1`)

	// herald status shows the running relay's destination as down.
	st := cli(t, nil, append([]string{"status", "--relay-admin", "http://" + addr}, flags...)...)
	require.Equal(t, 0, st.code, st)
	require.Regexp(t, `DESTINATION\s+BREAKER.*\n+default\s+open`, st.stdout)
	st = cli(t, nil, append([]string{"status", "--json", "--relay-admin", "http://" + addr + "/"}, flags...)...)
	require.Equal(t, 0, st.code, st)
	var sj statusJSON
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &sj))
	require.Len(t, sj.Destinations, 1)
	require.Equal(t, "default", sj.Destinations[0].Name)
	require.Equal(t, "open", sj.Destinations[0].Breaker)
	require.Contains(t, sj.Destinations[0].LastError, "nats", "and says why")
	bad := cli(t, nil, append([]string{"status", "--relay-admin", "ftp://" + addr}, flags...)...)
	require.Equal(t, 2, bad.code, bad)
	require.Contains(t, bad.stderr, "is not an http(s) URL")

	cancel()
	r := <-done
	for what, text := range map[string]string{"stderr": r.stderr, "stdout": r.stdout, "/metrics": metrics, "/readyz": ready, "/": page} {
		require.NotContains(t, text, canary, "the DSN's password leaked into %s", what)
		require.NotContains(t, text, adminToken, "the admin token leaked into %s", what)
	}
	require.Contains(t, r.stderr, `"msg":"admin server listening"`)
}
