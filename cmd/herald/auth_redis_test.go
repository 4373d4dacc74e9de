package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// startTLSRedis runs a redis-server of the test's own on a random port of
// 127.0.0.1 that speaks TLS only, with pki's server certificate, asks
// every client for a certificate of pki's CA (mutual TLS) when mutual, and
// knows one ACL user, user with password, allowed the keys under prefix
// only; the default user is off. It returns the port and a client of that
// user, and stops when the test ends. Without a redis-server built with
// TLS the test skips, or fails with CI=true.
func startTLSRedis(t *testing.T, pki *authPKI, mutual bool, user, password, prefix string) (string, *redis.Client) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server is not installed (apt-get install redis-server)")
	}
	// A build without TLS refuses the tls-port directive.
	out, _ := exec.Command(bin, "--tls-port", "0", "--port", "0").CombinedOutput()
	if !strings.Contains(string(out), "not to listen anywhere") && !strings.Contains(string(out), "not listen anywhere") {
		testenv.Unavailable(t, "redis-server was built without TLS (BUILD_TLS=yes; Debian's redis-server has it): "+strings.TrimSpace(string(out)))
	}
	port := freeTCPPort(t)
	auth := "no"
	if mutual {
		auth = "yes"
	}
	conf := []string{
		"bind 127.0.0.1", "port 0", "tls-port " + port,
		"tls-cert-file " + pki.serverCert, "tls-key-file " + pki.serverKey, "tls-ca-cert-file " + pki.ca,
		"tls-auth-clients " + auth,
		`save ""`, "appendonly no", "dir " + pki.dir, "loglevel warning",
		"user default off",
		"user " + user + " on >" + password + " ~" + prefix + "* +@all",
	}
	path := filepath.Join(t.TempDir(), "redis.conf")
	require.NoError(t, os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600))
	cmd := exec.Command(bin, path)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	cfg := &tls.Config{RootCAs: pki.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pki.client}}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + port, Username: user, Password: password, TLSConfig: cfg})
	t.Cleanup(func() { _ = rdb.Close() })
	require.Eventually(t, func() bool {
		return rdb.Ping(context.Background()).Err() == nil
	}, 10*time.Second, 20*time.Millisecond, "redis-server did not start: %s", &log)
	return port, rdb
}

// A rediss:// destination end to end: a redis-server of the test's own
// speaking TLS only, asking for a client certificate, with an ACL user;
// the relay trusts its CA (ca_file=), shows its certificate (cert_file=,
// key_file=), logs in as the URL's user with the password from a file
// (HERALD_DESTINATION_<NAME>_PASSWORD_FILE), and publishes; the password
// shows nowhere. A wrong password, a missing client certificate and an
// untrusted server each end the start in one line.
func TestRelayPublishesToRedisWithACLUserAndTLS(t *testing.T) {
	t.Parallel()
	d := setup(t)
	pki := newAuthPKI(t)
	const user, password = "relay-user", "Redis-ACL-pw-7731"
	stream := "herald-auth-" + d.schema
	port, rdb := startTLSRedis(t, pki, true, user, password, "herald-auth-")
	base := "rediss://" + user + "@127.0.0.1:" + port + "/0?maxlen=100&"
	env := map[string]string{"HERALD_DESTINATION_CACHE_PASSWORD_FILE": secretFile(t, password)}

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('`+stream+`', 'k', 'over tls')`)
	admin := freeAddr(t)
	r := start(t, env, append([]string{"relay", "--destination", "cache=" + base + pki.query(true), "--admin-addr", admin,
		"--log-level", "debug", "--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)
	waitPublished(t, d, 1)
	msgs, err := rdb.XRange(context.Background(), stream, "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	require.Equal(t, "over tls", msgs[0].Values["payload"])
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	requireNoSecretServed(t, r, admin, password)

	failing := func(t *testing.T, env map[string]string, url, says string) {
		t.Helper()
		failsAtOnce(t, env, append([]string{"relay", "--destination", "cache=" + url, "--log-level", "error"}, d.flags...), 1, says, password)
	}
	t.Run("AWrongPasswordIsRefusedInOneLine", func(t *testing.T) {
		t.Parallel()
		failing(t, map[string]string{"HERALD_DESTINATION_CACHE_PASSWORD": "not-" + password}, base+pki.query(true),
			"refused the credentials: WRONGPASS")
	})
	t.Run("APasswordInTheURLWorksToo", func(t *testing.T) {
		t.Parallel()
		u := strings.Replace(base, user+"@", user+":"+url.QueryEscape(password)+"@", 1) + pki.query(true)
		admin := freeAddr(t)
		r := start(t, nil, append([]string{"relay", "--destination", "cache=" + u, "--admin-addr", admin}, d.flags...)...)
		require.Eventually(t, func() bool {
			code, rj := readiness(t, admin)
			return code == 200 && rj.Ready
		}, 30*time.Second, 10*time.Millisecond)
		res := r.stop(t)
		require.Equal(t, 0, res.code, res)
		require.NotContains(t, res.stderr+res.stdout, password)
	})
	t.Run("WithoutItsClientCertificateTheServerRefusesTheRelayInOneLine", func(t *testing.T) {
		t.Parallel()
		failing(t, env, base+pki.query(false), "the TLS handshake failed: remote error: tls: certificate required (check the URL's ca_file, cert_file and key_file)")
	})
	t.Run("AServerTheRelayDoesNotTrustIsRefusedInOneLine", func(t *testing.T) {
		t.Parallel()
		other := "ca_file=" + url.QueryEscape(pki.otherCA) + "&cert_file=" + url.QueryEscape(pki.clientCert) + "&key_file=" + url.QueryEscape(pki.clientKey)
		failing(t, env, base+other, "the TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority")
		// The system's roots do not know the test's CA either.
		failing(t, env, "rediss://"+user+"@127.0.0.1:"+port, "x509: certificate signed by unknown authority")
	})
}

// requireNoSecretServed reads the running relay's admin page, /metrics and
// /readyz, stops the relay, and checks that none of them, nor its output,
// holds any of secrets.
func requireNoSecretServed(t *testing.T, r *running, admin string, secrets ...string) {
	t.Helper()
	pages := map[string]string{}
	for _, path := range []string{"/", "/metrics", "/readyz"} {
		code, body, err := get(admin, path)
		require.NoError(t, err)
		require.Equal(t, 200, code, "%s: %s", path, body)
		pages[path] = body
	}
	require.Contains(t, pages["/metrics"], "herald_published_total", "the metrics were served")
	res := r.stop(t)
	require.Equal(t, 0, res.code, res)
	pages["stderr"], pages["stdout"] = res.stderr, res.stdout
	require.Contains(t, res.stderr, "level=DEBUG", "the debug logs were written")
	for what, text := range pages {
		for _, s := range secrets {
			require.NotContains(t, text, s, fmt.Sprintf("a secret leaked into %s", what))
		}
	}
}
