package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// running is a command running in the background, whose output the test
// reads while it runs.
type running struct {
	stdout, stderr *testenv.LogBuffer
	cancel         context.CancelFunc
	done           chan int
}

// start runs the program with args in the background; stop ends it.
func start(t *testing.T, environ map[string]string, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{stdout: &testenv.LogBuffer{}, stderr: &testenv.LogBuffer{}, cancel: cancel, done: make(chan int, 1)}
	getenv := func(name string) (string, bool) { v, ok := environ[name]; return v, ok }
	go func() { r.done <- runWith(ctx, system{getenv: getenv}, args, r.stdout, r.stderr) }()
	t.Cleanup(func() { _ = r.stop(t) })
	return r
}

// stop does what the first SIGTERM does and returns how the command ended.
func (r *running) stop(t *testing.T) result {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.done:
		r.done <- code // for a second stop
		return result{code, r.stdout.String(), r.stderr.String()}
	case <-time.After(30 * time.Second):
		t.Fatal("the command did not stop after its context was cancelled")
		return result{}
	}
}

// readiness reads /readyz.
func readiness(t *testing.T, addr string) (int, readyJSON) {
	t.Helper()
	code, body, err := get(addr, "/readyz")
	if err != nil {
		return 0, readyJSON{}
	}
	var rj readyJSON
	require.NoError(t, json.Unmarshal([]byte(body), &rj), body)
	return code, rj
}

// proxy forwards the connections it accepts on addr to target until the
// test ends: a server that comes up on addr.
func proxy(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the port was taken in the meantime")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		_ = dst.(*net.TCPConn).CloseWrite()
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			wg.Go(func() { pipe(up, c) })
			wg.Go(func() { pipe(c, up) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
}

// The relay started while its database is down waits for it: /healthz
// answers, /readyz says what it waits for, each try is logged (without the
// password), and once the database answers the relay starts relaying.
func TestRelayWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	d := setup(t)
	const canary = "canary-Pw-5521"
	u, err := url.Parse(testenv.PostgresDSN(t))
	require.NoError(t, err)
	if u.Host == "" || u.User == nil {
		t.Skip("the test database's DSN has no host:port and user to proxy to")
	}
	realAddr, downAddr := u.Host, freeAddr(t)
	u.Host = downAddr
	u.User = url.UserPassword(u.User.Username(), canary) // trust authentication takes any password
	ns := testenv.NATS(t)
	ns.CreateStream(t, "WAITDB", "waitdb.>")
	admin := freeAddr(t)

	r := start(t, nil, "relay", "--db", u.String(), "--schema", d.schema, "--publisher", ns.URL(), "--admin-addr", admin,
		"--poll-interval", "2ms", "--idle-poll-interval", "20ms")
	var rj readyJSON
	require.Eventually(t, func() bool {
		var code int
		code, rj = readiness(t, admin)
		return code == http.StatusServiceUnavailable && strings.Contains(rj.Database, "cannot reach the database postgres@"+downAddr)
	}, 30*time.Second, 10*time.Millisecond, "/readyz says the database is not reached: %+v", rj)
	require.False(t, rj.Ready)
	require.True(t, rj.Starting)
	require.Contains(t, rj.Database, "connection refused")
	code, body, err := get(admin, "/healthz")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "the process is alive: %s", body)
	// It keeps trying, with a pause between two tries.
	require.Eventually(t, func() bool {
		return strings.Contains(r.stderr.String(), "attempt=2 ")
	}, 30*time.Second, 10*time.Millisecond, r.stderr.String())
	require.Contains(t, r.stderr.String(), `level=WARN msg="waiting for the database before relaying"`)
	require.Contains(t, r.stderr.String(), "retry_in=500ms")

	// The database comes up on that address.
	proxy(t, downAddr, realAddr)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('waitdb.placed', 'k', 'x')`)
	require.Eventually(t, func() bool {
		code, rj = readiness(t, admin)
		return code == http.StatusOK && rj.Ready
	}, 30*time.Second, 10*time.Millisecond, "ready once the database answers: %+v", rj)
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 1
	}, 30*time.Second, 10*time.Millisecond)

	res := r.stop(t)
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "relay stopped: 1 published")
	require.NotContains(t, res.stdout+res.stderr, canary)
}

// The relay started while its broker is down waits for it the same way.
func TestRelayWaitsForTheBroker(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	ns.CreateStream(t, "WAITNATS", "waitnats.>")
	ns.Stop()
	admin := freeAddr(t)
	r := start(t, nil, append([]string{"relay", "--publisher", ns.URL(), "--admin-addr", admin,
		"--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)

	var rj readyJSON
	require.Eventually(t, func() bool {
		var code int
		code, rj = readiness(t, admin)
		return code == http.StatusServiceUnavailable && rj.Destination != ""
	}, 30*time.Second, 10*time.Millisecond)
	require.True(t, rj.Starting)
	require.Empty(t, rj.Database, "the database answers")
	require.Contains(t, rj.Destination, "cannot reach destination default at "+ns.URL())
	code, metrics, err := get(admin, "/metrics")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, metrics, "herald_relay_up 0")
	require.Eventually(t, func() bool {
		return strings.Contains(r.stderr.String(), "attempt=2 ")
	}, 30*time.Second, 10*time.Millisecond, r.stderr.String())
	require.Contains(t, r.stderr.String(), `msg="waiting for the destination default before relaying"`)

	ns.Restart(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('waitnats.placed', 'k', 'x')`)
	require.Eventually(t, func() bool {
		code, rj = readiness(t, admin)
		return code == http.StatusOK && rj.Ready
	}, 30*time.Second, 10*time.Millisecond, "ready once the broker answers: %+v", rj)
	js := ns.CreateStream(t, "WAITNATS", "waitnats.>") // the stream as it is, kept across the restart
	require.Eventually(t, func() bool {
		si, err := js.Info(context.Background())
		return err == nil && si.State.Msgs == 1
	}, 30*time.Second, 10*time.Millisecond)
	res := r.stop(t)
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "relay stopped: 1 published")
}

// Only unreachability is waited for: a configuration the database refuses
// ends the relay at once.
func TestRelayFailsFastOnConfigurationTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	d := setup(t)
	u, err := url.Parse(testenv.PostgresDSN(t))
	require.NoError(t, err)
	u.Path = "/herald_no_such_database"
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"UnknownDatabase", []string{"--db", u.String()}, `database "herald_no_such_database" does not exist`},
		{"TableNotMigrated", []string{"--db", testenv.PostgresDSN(t), "--schema", d.schema, "--table", "never_migrated"}, "run `herald migrate`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Were the relay to wait, the deadline would stop it with 0.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			r := cliCtx(ctx, nil, nil, append([]string{"relay", "--publisher", "nats://127.0.0.1:1"}, tc.args...)...)
			require.Equal(t, 1, r.code, r)
			require.Contains(t, r.stderr, tc.says)
			require.NotContains(t, r.stderr, "waiting for", "no retry")
		})
	}
}

// A webhook destination the address guard refuses is a configuration
// error: a literal address ends the start; a name that resolves to one
// makes the relay not ready, naming the destination, and its events are
// retried and dead-lettered rather than held as in an outage.
func TestWebhookDestinationRefusedByTheAddressGuard(t *testing.T) {
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const pathToken = "PathTok3n-0077"
	var requests atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { requests.Add(1) }))
	t.Cleanup(hook.Close)
	env := map[string]string{"HERALD_WEBHOOK_SECRET": secret}

	t.Run("ALiteralAddressFailsTheStart", func(t *testing.T) {
		t.Parallel()
		r := cli(t, env, "relay", "--db", "postgres://127.0.0.1:1/db", "--destination", "hook="+hook.URL+"/in/"+pathToken+"?token="+pathToken,
			"--route", "a=hook")
		require.Equal(t, 2, r.code, r)
		require.Equal(t, "herald: destination hook: refusing to connect to 127.0.0.1 (loopback address): allow it with HERALD_WEBHOOK_ALLOW_NETWORKS (CIDRs, comma-separated)\n", r.stderr)
		// Allowed, it goes on to the (unreachable) database.
		allowed := map[string]string{"HERALD_WEBHOOK_SECRET": secret, "HERALD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}
		r = cli(t, allowed, "relay", "--db", "postgres://127.0.0.1:1/db", "--publisher", hook.URL+"/in", "--batch-size", "0")
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, "herald: --batch-size: 0 is not positive", "checked after the destinations")
	})

	t.Run("ANameThatResolvesToOneIsNotReadyAndDeadLetters", func(t *testing.T) {
		t.Parallel()
		requireLocalhost(t)
		d := setup(t)
		admin := freeAddr(t)
		byName := strings.Replace(hook.URL, "127.0.0.1", "localhost", 1)
		r := start(t, env, append([]string{"relay", "--publisher", byName + "/in/" + pathToken + "?token=" + pathToken,
			"--admin-addr", admin, "--max-attempts", "2", "--retry-base", "10ms", "--retry-cap", "20ms",
			"--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)
		require.Eventually(t, func() bool {
			code, rj := readiness(t, admin)
			return code == http.StatusOK && rj.Ready
		}, 30*time.Second, 10*time.Millisecond, "ready before any request: nothing is known yet")

		d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders', 'k', 'x')`)
		var (
			state, lastError string
			attempts         int
		)
		require.Eventually(t, func() bool {
			err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
				`SELECT state, attempts, coalesce(last_error, '') FROM %s.herald_outbox`, d.schema)).Scan(&state, &attempts, &lastError)
			return err == nil && state == "dead"
		}, 30*time.Second, 10*time.Millisecond)
		require.Equal(t, 2, attempts, "each try spent an attempt: no outage")
		require.Contains(t, lastError, "refusing to connect to 127.0.0.1 (loopback address): allow it with HERALD_WEBHOOK_ALLOW_NETWORKS",
			"the dead letter names the variable, not a Go field")

		code, rj := readiness(t, admin)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.False(t, rj.Ready)
		require.True(t, rj.Running)
		require.Empty(t, rj.Destination, "not an outage")
		require.Equal(t, "destination default: heraldwebhook: endpoint "+byName+
			": refusing to connect to 127.0.0.1 (loopback address): allow it with HERALD_WEBHOOK_ALLOW_NETWORKS (CIDRs, comma-separated)", rj.Config)
		require.Zero(t, requests.Load(), "nothing reached the server")

		res := r.stop(t)
		require.Equal(t, 0, res.code, res)
		require.Contains(t, res.stdout, "0 published, 1 retried, 1 dead")
		require.NotContains(t, res.stdout+res.stderr+lastError, pathToken)
		require.Equal(t, 1, strings.Count(res.stderr, "address guard refused"), res.stderr)
	})
}

// requireLocalhost checks that the name localhost resolves, from the hosts
// file, to loopback addresses only.
func requireLocalhost(t *testing.T) {
	t.Helper()
	addrs, err := net.DefaultResolver.LookupNetIP(t.Context(), "ip", "localhost")
	require.NoError(t, err, "localhost must resolve (/etc/hosts)")
	for _, a := range addrs {
		require.Truef(t, a.Unmap().IsLoopback(), "localhost resolves to %s", a)
	}
}
