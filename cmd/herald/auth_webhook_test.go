package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// standardSignatures checks a request as the Standard Webhooks
// specification says, written apart from Herald's code: it returns, for
// each secret, whether one v1 entry of the space-separated
// webhook-signature header is the base64 HMAC-SHA256, under the secret's
// key (the base64 after "whsec_"), of "webhook-id.webhook-timestamp.body".
func standardSignatures(t *testing.T, h http.Header, body []byte, secrets ...string) []bool {
	t.Helper()
	var entries []string
	for _, e := range strings.Split(h.Get("webhook-signature"), " ") {
		if v, sig, ok := strings.Cut(e, ","); ok && v == "v1" {
			entries = append(entries, sig)
		}
	}
	out := make([]bool, len(secrets))
	for i, secret := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		require.NoError(t, err)
		m := hmac.New(sha256.New, key)
		fmt.Fprintf(m, "%s.%s.%s", h.Get("webhook-id"), h.Get("webhook-timestamp"), body)
		want := base64.StdEncoding.EncodeToString(m.Sum(nil))
		for _, e := range entries {
			out[i] = out[i] || hmac.Equal([]byte(e), []byte(want))
		}
	}
	return out
}

// Webhook secrets per destination and their rollover, end to end: hook-a
// has secrets of its own, the new one from a file and the previous one
// from the environment, and every request carries a signature under each;
// hook-b takes HERALD_WEBHOOK_SECRET, and its requests carry that one
// signature only. The receivers check with heraldwebhook.Verify and
// VerifyAny and with a verification of their own; no secret shows in the
// relay's output, logs, metrics or admin page. A receiver on a secret the
// relay does not sign with refuses its requests: the events are dead, the
// dead letter says 401 and holds no secret.
func TestRelaySignsWebhooksWithPerDestinationSecretsAndRollsThemOver(t *testing.T) {
	t.Parallel()
	d := setup(t)
	secret := func(key string) string { return "whsec_" + base64.StdEncoding.EncodeToString([]byte(key)) }
	var (
		newA     = secret("hook-a's new key of 32 bytes...")
		previous = secret("hook-a's retiring key, 32 bytes")
		shared   = secret("every other hook's key, 32 byte")
		stranger = secret("a key the relay never signs wit")
	)
	type seen struct {
		path string
		sigs []bool // under newA, previous, shared
	}
	var (
		mu  sync.Mutex
		got []seen
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var err error
		switch r.URL.Path {
		case "/a":
			// Receivers on either side of the rollover accept it.
			if err = heraldwebhook.Verify(newA, r.Header, body, time.Minute); err == nil {
				if err = heraldwebhook.Verify(previous, r.Header, body, time.Minute); err == nil {
					err = heraldwebhook.VerifyAny([]string{previous, stranger}, r.Header, body, time.Minute)
				}
			}
		case "/b":
			err = heraldwebhook.Verify(shared, r.Header, body, time.Minute)
		default:
			err = heraldwebhook.Verify(stranger, r.Header, body, time.Minute)
		}
		if err != nil {
			http.Error(w, "signature refused", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got = append(got, seen{r.URL.Path, standardSignatures(t, r.Header, body, newA, previous, shared)})
		mu.Unlock()
	}))
	t.Cleanup(hook.Close)

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('a.placed', 'k', '{"n":1}'), ('b.placed', 'k', '{"n":2}'),
		('c.placed', 'k', '{"n":3}')`)
	env := map[string]string{
		"HERALD_WEBHOOK_ALLOW_NETWORKS":             "127.0.0.0/8",
		"HERALD_WEBHOOK_SECRET":                     shared,
		"HERALD_DESTINATION_HOOK_A_SECRET_FILE":     secretFile(t, newA),
		"HERALD_DESTINATION_HOOK_A_PREVIOUS_SECRET": previous,
	}
	admin := freeAddr(t)
	r := start(t, env, append([]string{"relay", "--destination", "hook-a=" + hook.URL + "/a", "--destination", "hook-b=" + hook.URL + "/b",
		"--destination", "hook-c=" + hook.URL + "/c", "--route", "a.*=hook-a", "--route", "b.*=hook-b", "--route", "c.*=hook-c",
		"--max-attempts", "1", "--admin-addr", admin, "--log-level", "debug", "--poll-interval", "2ms", "--idle-poll-interval", "20ms"},
		d.flags...)...)
	require.Eventually(t, func() bool {
		var done int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state IN ('published', 'dead')`, d.schema)).Scan(&done)
		return err == nil && done == 3
	}, 30*time.Second, 20*time.Millisecond)
	var lastError string
	require.NoError(t, testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
		`SELECT coalesce(last_error, '') FROM %s.herald_outbox WHERE topic = 'c.placed' AND state = 'dead'`, d.schema)).Scan(&lastError))
	require.Contains(t, lastError, "401", "the receiver on another secret refused it")

	mu.Lock()
	require.ElementsMatch(t, []seen{
		{"/a", []bool{true, true, false}},  // both secrets of the rollover
		{"/b", []bool{false, false, true}}, // the shared secret alone
	}, got)
	mu.Unlock()
	secrets := []string{}
	for _, s := range []string{newA, previous, shared} {
		secrets = append(secrets, strings.TrimPrefix(s, "whsec_"))
	}
	for _, s := range secrets {
		require.NotContains(t, lastError, s)
	}
	requireNoSecretServed(t, r, admin, secrets...)
}
