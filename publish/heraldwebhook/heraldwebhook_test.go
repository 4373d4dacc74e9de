package heraldwebhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testSecret signs by default; otherSecret is a second endpoint's.
const testSecret = vectorSecret

var otherSecret = heraldwebhook.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("another endpoint's 32-byte key!!"))

// loopback allows the httptest servers, which listen on 127.0.0.1.
var loopback = []string{"127.0.0.0/8"}

// sign computes a webhook-signature independently of the package.
func sign(t *testing.T, secret, id, ts string, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// request is one request as the receiver saw it.
type request struct {
	method string
	path   string
	host   string
	header http.Header
	body   []byte
	// contentLength and transferEncoding as the server parsed them.
	contentLength    int64
	transferEncoding []string
	status           int // the status the receiver answered
}

func (r *request) id() string  { return r.header.Get("webhook-id") }
func (r *request) key() string { return r.header.Get(herald.HeaderKey) }

// receiver is a webhook endpoint that verifies every request's signature
// and records it.
type receiver struct {
	// secrets maps a URL path to the secret its requests are signed with;
	// other paths use testSecret.
	secrets map[string]string
	// maxBody is the largest body it accepts; larger ones get 413.
	maxBody int64
	// Respond, when set, answers a verified request instead of 204: it may
	// set headers, may block, and returns the status to write.
	Respond func(w http.ResponseWriter, r *request) int

	mu       sync.Mutex
	reqs     []*request
	badSigs  []string
	changed  chan struct{}
	shutdown chan struct{} // closed when the test ends, to free blocked handlers
}

func newReceiver() *receiver {
	return &receiver{maxBody: 1 << 20, changed: make(chan struct{}), shutdown: make(chan struct{})}
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, rc.maxBody))
	req := &request{
		method: r.Method, path: r.URL.Path, host: r.Host, header: r.Header.Clone(), body: body,
		contentLength: r.ContentLength, transferEncoding: r.TransferEncoding,
	}
	if err != nil {
		req.status = http.StatusRequestEntityTooLarge
		rc.record(req)
		w.WriteHeader(req.status)
		return
	}
	secret := testSecret
	if s, ok := rc.secrets[r.URL.Path]; ok {
		secret = s
	}
	if err := heraldwebhook.Verify(secret, r.Header, body, time.Minute); err != nil {
		rc.mu.Lock()
		rc.badSigs = append(rc.badSigs, fmt.Sprintf("%s %s: %v", r.URL.Path, r.Header.Get("webhook-id"), err))
		rc.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	req.status = http.StatusNoContent
	if rc.Respond != nil {
		req.status = rc.Respond(w, req)
	}
	rc.record(req)
	w.WriteHeader(req.status)
}

func (rc *receiver) record(r *request) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.reqs = append(rc.reqs, r)
	close(rc.changed)
	rc.changed = make(chan struct{})
}

// requests returns the recorded requests that match keep, in arrival
// order, after checking that every signature verified.
func (rc *receiver) requests(t *testing.T, keep func(*request) bool) []*request {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	require.Empty(t, rc.badSigs, "every request carries a valid signature")
	var out []*request
	for _, r := range rc.reqs {
		if keep == nil || keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// wait waits, at most 10s, until n recorded requests match keep, and
// returns every match.
func (rc *receiver) wait(t *testing.T, n int, keep func(*request) bool) []*request {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		rc.mu.Lock()
		changed := rc.changed
		rc.mu.Unlock()
		got := rc.requests(t, keep)
		if len(got) >= n {
			return got
		}
		select {
		case <-changed:
		case <-deadline.C:
			require.FailNowf(t, "requests missing", "only %d of %d requests arrived", len(got), n)
		}
	}
}

type bundle struct {
	rcv *receiver
	srv *httptest.Server
}

// setup starts a receiver on 127.0.0.1, closed when the test ends.
func setup(t *testing.T) *bundle {
	t.Helper()
	rcv := newReceiver()
	srv := httptest.NewServer(rcv)
	t.Cleanup(func() {
		close(rcv.shutdown)
		srv.Close()
	})
	return &bundle{rcv: rcv, srv: srv}
}

func (b *bundle) url(path string) string { return b.srv.URL + path }

// publisher returns a publisher of cfg (nil: every topic to /hooks),
// allowed to reach loopback unless cfg says otherwise, closed when the
// test ends.
func (b *bundle) publisher(t *testing.T, cfg *heraldwebhook.Config) *heraldwebhook.Publisher {
	t.Helper()
	if cfg == nil {
		cfg = &heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: b.url("/hooks")}, Secret: testSecret, AllowedNetworks: loopback}
	}
	return newPublisher(t, cfg)
}

func newPublisher(t *testing.T, cfg *heraldwebhook.Config) *heraldwebhook.Publisher {
	t.Helper()
	p, err := heraldwebhook.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// envelope is an event as an ordered relay hands it over: ordered when it
// has a key.
func envelope(topic, key, payload string) herald.Envelope {
	return herald.Envelope{
		Message: herald.Message{ID: herald.NewID(), Topic: topic, Key: key, Payload: []byte(payload)},
		Attempt: 1, CreatedAt: time.Now(), Ordered: key != "",
	}
}

// unordered is an event of a topic the relay does not order.
func unordered(topic, key, payload string) herald.Envelope {
	env := envelope(topic, key, payload)
	env.Ordered = false
	return env
}

func publish(t *testing.T, p herald.Publisher, batch ...herald.Envelope) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	return p.Publish(ctx, batch)
}

func batchErrors(t *testing.T, err error, n int) []error {
	t.Helper()
	var be *herald.BatchError
	require.ErrorAsf(t, err, &be, "a per-event result is expected: %v", err)
	require.Len(t, be.Errs, n)
	return be.Errs
}

func byKey(key string) func(*request) bool {
	return func(r *request) bool { return r.key() == key }
}

func ids(reqs []*request) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.id()
	}
	return out
}

func TestRequest(t *testing.T) {
	t.Parallel()

	t.Run("EachEventIsOneSignedPostOfItsPayload", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, nil)
		env := envelope("orders", "order-42", `{"order":42}`)
		env.Type, env.AggregateType, env.AggregateID = "order.placed", "order", "42"
		env.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "X-Tenant": "acme"}
		before := time.Now().Unix()
		require.NoError(t, publish(t, p, env))
		after := time.Now().Unix()

		reqs := b.rcv.requests(t, nil)
		require.Len(t, reqs, 1)
		r := reqs[0]
		require.Equal(t, http.MethodPost, r.method)
		require.Equal(t, "/hooks", r.path)
		require.Equal(t, env.Payload, r.body)
		require.Equal(t, "application/json", r.header.Get("Content-Type"))
		require.Equal(t, heraldwebhook.DefaultUserAgent, r.header.Get("User-Agent"))

		require.Equal(t, env.ID, r.header.Get("webhook-id"))
		ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
		require.NoError(t, err)
		require.True(t, before <= ts && ts <= after, "webhook-timestamp is the time of the attempt in unix seconds")
		require.Equal(t, sign(t, testSecret, env.ID, r.header.Get("webhook-timestamp"), env.Payload), r.header.Get("webhook-signature"),
			"the signature is v1, and the base64 HMAC-SHA256 of id.timestamp.body")

		require.Equal(t, env.ID, r.header.Get(herald.HeaderID))
		require.Equal(t, "orders", r.header.Get(herald.HeaderTopic))
		require.Equal(t, "order-42", r.header.Get(herald.HeaderKey))
		require.Equal(t, "order.placed", r.header.Get(herald.HeaderType))
		require.Equal(t, "order", r.header.Get(herald.HeaderAggregateType))
		require.Equal(t, "42", r.header.Get(herald.HeaderAggregateID))
		require.Equal(t, env.Headers["traceparent"], r.header.Get("traceparent"))
		require.Equal(t, "acme", r.header.Get("X-Tenant"))
	})

	t.Run("TheProducersContentTypeIsKept", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		env := envelope("orders", "k", "<order/>")
		env.Headers = map[string]string{"content-type": "application/xml"}
		require.NoError(t, publish(t, b.publisher(t, nil), env))
		reqs := b.rcv.requests(t, nil)
		require.Len(t, reqs, 1)
		require.Equal(t, []string{"application/xml"}, reqs[0].header.Values("Content-Type"))
	})

	t.Run("EachTopicGoesToItsURLWithItsSecretAndOthersToTheDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.rcv.secrets = map[string]string{"/payments": otherSecret}
		p := b.publisher(t, &heraldwebhook.Config{
			Endpoints: map[string]heraldwebhook.Endpoint{
				"orders":   {URL: b.url("/orders")},
				"payments": {URL: b.url("/payments"), Secret: otherSecret},
			},
			Default:         heraldwebhook.Endpoint{URL: b.url("/default")},
			Secret:          testSecret,
			AllowedNetworks: loopback,
		})
		envs := []herald.Envelope{envelope("orders", "a", "1"), envelope("payments", "b", "2"), envelope("orders.archive", "c", "3")}
		require.NoError(t, publish(t, p, envs...))
		paths := map[string]string{}
		for _, r := range b.rcv.requests(t, nil) {
			paths[r.id()] = r.path
		}
		require.Equal(t, map[string]string{envs[0].ID: "/orders", envs[1].ID: "/payments", envs[2].ID: "/default"}, paths,
			"exact topic names choose the URL; the receiver verified each with its endpoint's secret")
	})

	t.Run("ATopicWithoutEndpointIsPermanent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldwebhook.Config{
			Endpoints:       map[string]heraldwebhook.Endpoint{"orders": {URL: b.url("/orders")}},
			Secret:          testSecret,
			AllowedNetworks: loopback,
		})
		errs := batchErrors(t, publish(t, p, envelope("orders", "a", "1"), envelope("unknown", "b", "2")), 2)
		require.NoError(t, errs[0])
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.ErrorContains(t, errs[1], `no endpoint for topic "unknown"`)
	})

	t.Run("ReservedHeadersOfARowAreNotSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		env := envelope("orders", "k", `{"a":1}`)
		// A row inserted with SQL skips the Writer's validation.
		env.Headers = map[string]string{
			"Connection": "close, X-Tenant", "Keep-Alive": "timeout=1", "Proxy-Authorization": "Basic eDp5",
			"Proxy-Connection": "close", "TE": "trailers", "Trailer": "X-Late", "Transfer-Encoding": "chunked",
			"Upgrade": "h2c", "Host": "internal.example", "Content-Length": "1", "Expect": "100-continue",
			"webhook-id": "forged", "Webhook-Signature": "v1,forged", "webhook-timestamp": "1",
			"Herald-Id": "forged", "herald-key": "forged", "User-Agent": "forged",
			"X-Tenant": "acme",
		}
		require.NoError(t, publish(t, b.publisher(t, nil), env))
		reqs := b.rcv.requests(t, nil)
		require.Len(t, reqs, 1, "the request went through, verified")
		r := reqs[0]
		for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect"} {
			require.Emptyf(t, r.header.Values(name), "header %s", name)
		}
		require.Empty(t, r.transferEncoding, "Transfer-Encoding")
		require.Equal(t, int64(len(env.Payload)), r.contentLength, "Content-Length is the publisher's")
		require.Equal(t, strings.TrimPrefix(b.srv.URL, "http://"), r.host, "Host is the endpoint's")
		require.Equal(t, []string{env.ID}, r.header.Values("webhook-id"))
		require.Len(t, r.header.Values("webhook-signature"), 1)
		require.Equal(t, []string{env.ID}, r.header.Values(herald.HeaderID))
		require.Equal(t, []string{"k"}, r.header.Values(herald.HeaderKey))
		require.Equal(t, []string{heraldwebhook.DefaultUserAgent}, r.header.Values("User-Agent"))
		require.Equal(t, "acme", r.header.Get("X-Tenant"))
	})

	t.Run("AHeaderThatCannotBeSentFailsItsEventAndHoldsBackItsKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bad := envelope("orders", "a", "2")
		bad.Headers = map[string]string{"X-Split": "one\r\nX-Injected: two"}
		envs := []herald.Envelope{envelope("orders", "a", "1"), bad, envelope("orders", "b", "3"), envelope("orders", "a", "4")}
		errs := batchErrors(t, publish(t, b.publisher(t, nil), envs...), len(envs))
		require.NoError(t, errs[0])
		require.True(t, herald.IsPermanent(errs[1]), "%v", errs[1])
		require.NoError(t, errs[2])
		require.ErrorIs(t, errs[3], herald.ErrHeldBack)
		require.ElementsMatch(t, []string{envs[0].ID, envs[2].ID}, ids(b.rcv.requests(t, nil)))
	})

	t.Run("AnEmptyBatchSendsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, publish(t, b.publisher(t, nil)))
		require.Empty(t, b.rcv.requests(t, nil))
	})
}

func TestStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status    int
		ok        bool
		permanent bool
	}{
		{200, true, false}, {201, true, false}, {202, true, false}, {204, true, false},
		{400, false, true}, {401, false, true}, {404, false, true}, {410, false, true}, {413, false, true}, {422, false, true},
		{408, false, false}, {429, false, false}, {500, false, false}, {502, false, false}, {503, false, false}, {504, false, false},
		{301, false, false}, {302, false, false}, {307, false, false}, {308, false, false},
	} {
		t.Run(fmt.Sprintf("Status%dIs%s", c.status, map[bool]string{true: "Success", false: map[bool]string{true: "Permanent", false: "Retryable"}[c.permanent]}[c.ok]), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.rcv.Respond = func(w http.ResponseWriter, _ *request) int {
				if c.status/100 == 3 {
					w.Header().Set("Location", "/elsewhere")
				}
				return c.status
			}
			err := publish(t, b.publisher(t, nil), envelope("orders", "k", "{}"))
			if c.ok {
				require.NoError(t, err)
				return
			}
			errs := batchErrors(t, err, 1)
			var se *heraldwebhook.StatusError
			require.ErrorAs(t, errs[0], &se)
			require.Equal(t, c.status, se.StatusCode)
			require.Equal(t, c.permanent, herald.IsPermanent(errs[0]), "%v", errs[0])
			require.Equal(t, !c.permanent, se.Retryable())
			require.Len(t, b.rcv.requests(t, nil), 1, "one request; a redirect is not followed")
		})
	}

	t.Run("RetryAfterIsKeptInSecondsAndAsAnHTTPDate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		at := time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)
		b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
			if r.key() == "seconds" {
				w.Header().Set("Retry-After", "120")
				return http.StatusTooManyRequests
			}
			w.Header().Set("Retry-After", at)
			return http.StatusServiceUnavailable
		}
		errs := batchErrors(t, publish(t, b.publisher(t, nil), envelope("orders", "seconds", "{}"), envelope("orders", "date", "{}")), 2)

		d, ok := heraldwebhook.RetryAfter(errs[0])
		require.True(t, ok)
		require.Equal(t, 120*time.Second, d)
		require.ErrorContains(t, errs[0], "retry after 2m0s")

		d, ok = heraldwebhook.RetryAfter(errs[1])
		require.True(t, ok)
		require.InDelta(t, time.Hour.Seconds(), d.Seconds(), 5, "an HTTP-date is turned into the delay until then")
	})

	t.Run("RetryAfterParsing", func(t *testing.T) {
		t.Parallel()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		for v, want := range map[string]time.Duration{
			"":                              0,
			"0":                             0,
			"-5":                            0,
			"7":                             7 * time.Second,
			" 30 ":                          30 * time.Second,
			"soon":                          0,
			"Sun, 01 Mar 2026 12:01:30 GMT": 90 * time.Second,
			"Sun, 01 Mar 2026 11:00:00 GMT": 0, // past
			"99999999999999999999":          0, // not an int64: not a date either
			"9999999999":                    366 * 24 * time.Hour,
		} {
			require.Equalf(t, want, heraldwebhook.ParseRetryAfter(v, now), "Retry-After %q", v)
		}
		_, ok := heraldwebhook.RetryAfter(errors.New("no status"))
		require.False(t, ok)
	})

	t.Run("ARedirectToAnotherHostIsNotFollowed", func(t *testing.T) {
		t.Parallel()
		target := setup(t)
		b := setup(t)
		b.rcv.Respond = func(w http.ResponseWriter, _ *request) int {
			w.Header().Set("Location", target.url("/stolen"))
			return http.StatusTemporaryRedirect
		}
		errs := batchErrors(t, publish(t, b.publisher(t, nil), envelope("orders", "k", "{}")), 1)
		var se *heraldwebhook.StatusError
		require.ErrorAs(t, errs[0], &se)
		require.Equal(t, http.StatusTemporaryRedirect, se.StatusCode)
		require.False(t, herald.IsPermanent(errs[0]))
		require.ErrorContains(t, errs[0], "redirects are not followed")
		require.Empty(t, target.rcv.requests(t, nil), "the other host received nothing")
	})
}

func TestTransportFailures(t *testing.T) {
	t.Parallel()

	t.Run("EachRequestIsBoundedByTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.rcv.Respond = func(http.ResponseWriter, *request) int {
			<-b.rcv.shutdown // answer only when the test ends
			return http.StatusOK
		}
		p := b.publisher(t, &heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: b.url("/slow")}, Secret: testSecret,
			Timeout: 200 * time.Millisecond, AllowedNetworks: loopback,
		})
		start := time.Now()
		err := publish(t, p, envelope("orders", "a", "1"), envelope("orders", "b", "2"))
		require.Less(t, time.Since(start), 5*time.Second)
		require.Error(t, err)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "every request timed out: an outage, not per-event results: %v", err)
		require.False(t, herald.IsPermanent(err))
		require.ErrorContains(t, err, "no answer within 200ms")
	})

	t.Run("CancellingTheContextReturnsPromptly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		arrived := make(chan struct{})
		var once sync.Once
		b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
			once.Do(func() { close(arrived) })
			<-b.rcv.shutdown
			return http.StatusOK
		}
		p := b.publisher(t, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		done := make(chan error, 1)
		var took time.Duration
		go func() {
			start := time.Now()
			err := p.Publish(ctx, []herald.Envelope{envelope("orders", "k", "1"), envelope("orders", "k", "2"), envelope("orders", "j", "3")})
			took = time.Since(start)
			done <- err
		}()
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("no request arrived")
		}
		cancelled := time.Now()
		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Publish did not return after its context was cancelled")
		}
		require.Less(t, time.Since(cancelled), 2*time.Second, "Publish returns promptly")
		require.Positive(t, took)
		require.ErrorIs(t, err, context.Canceled)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "nothing was confirmed: %v", err)
	})

	t.Run("AnUnreachableEndpointIsAnOutage", func(t *testing.T) {
		t.Parallel()
		p := newPublisher(t, &heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: "http://127.0.0.1:1/hooks"}, Secret: testSecret, AllowedNetworks: loopback,
		})
		err := publish(t, p, envelope("orders", "a", "1"), envelope("orders", "a", "2"), envelope("orders", "b", "3"))
		require.Error(t, err)
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "a plain error makes the relay back off without spending attempts: %v", err)
		require.False(t, herald.IsPermanent(err))
		require.ErrorIs(t, err, syscall.ECONNREFUSED)
	})

	t.Run("OneReachableEndpointMakesItPerEventResults", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldwebhook.Config{
			Endpoints: map[string]heraldwebhook.Endpoint{"down": {URL: "http://127.0.0.1:1/hooks"}},
			Default:   heraldwebhook.Endpoint{URL: b.url("/hooks")}, Secret: testSecret, AllowedNetworks: loopback,
		})
		errs := batchErrors(t, publish(t, p, envelope("down", "a", "1"), envelope("up", "b", "2")), 2)
		require.ErrorIs(t, errs[0], syscall.ECONNREFUSED)
		require.False(t, herald.IsPermanent(errs[0]))
		require.NoError(t, errs[1])
	})
}

func TestAddressGuard(t *testing.T) {
	t.Parallel()

	t.Run("ALiteralRefusedAddressFailsNew", func(t *testing.T) {
		t.Parallel()
		const secret = "s3cr3tQueryToken"
		for _, c := range []struct {
			url, reason, addr string
			allowed           []string
		}{
			{"http://user:" + secret + "@127.0.0.1:8080/hooks/" + secret + "?token=" + secret, "loopback", "127.0.0.1", nil},
			{"http://127.0.0.1:8080/hooks", "loopback", "127.0.0.1", []string{"10.0.0.0/8", "::1/128"}},
			{"https://[::1]/hooks", "loopback", "::1", nil},
			{"https://[::ffff:127.0.0.1]/hooks", "loopback", "127.0.0.1", nil},
			{"https://10.1.2.3/hooks", "private", "10.1.2.3", []string{"127.0.0.0/8"}},
			{"http://169.254.169.254/latest/meta-data", "link-local", "169.254.169.254", nil},
			{"https://[fe80::1%25eth0]:8443/", "link-local", "fe80::1", nil},
		} {
			for _, field := range []string{"Config.Default.URL", `Config.Endpoints["orders"].URL`} {
				cfg := &heraldwebhook.Config{Secret: testSecret, AllowedNetworks: c.allowed}
				if field == "Config.Default.URL" {
					cfg.Default = heraldwebhook.Endpoint{URL: c.url}
				} else {
					cfg.Endpoints = map[string]heraldwebhook.Endpoint{"orders": {URL: c.url}}
				}
				_, err := heraldwebhook.New(cfg)
				require.Errorf(t, err, "%s in %s", c.url, field)
				require.Equal(t, "heraldwebhook: "+field+": refusing to connect to "+c.addr+" ("+c.reason+
					" address): allow it with Config.AllowedNetworks or Config.AllowPrivate", err.Error())
				var refused *heraldwebhook.RefusedDestinationError
				require.ErrorAs(t, err, &refused)
				require.Equal(t, c.addr, refused.Addr.String())
			}
		}
		// Allowed, the same literals are fine.
		for _, c := range []struct {
			url     string
			allowed []string
		}{{"http://127.0.0.1:8080/hooks", loopback}, {"https://10.1.2.3/hooks", []string{"10.0.0.0/8"}}, {"https://[::1]/", []string{"::1/128"}}} {
			newPublisher(t, &heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: c.url}, Secret: testSecret, AllowedNetworks: c.allowed})
		}
		newPublisher(t, &heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: "http://127.0.0.1/"}, Secret: testSecret, AllowPrivate: true})
	})

	t.Run("ANameThatResolvesToARefusedAddressFailsItsEventsWithoutAnOutage", func(t *testing.T) {
		t.Parallel()
		requireLocalhost(t)
		b := setup(t)
		var logs testenv.LogBuffer
		byName := strings.Replace(b.url("/hooks?token=s3cr3t"), "127.0.0.1", "localhost", 1)
		p := b.publisher(t, &heraldwebhook.Config{
			Endpoints: map[string]heraldwebhook.Endpoint{"named": {URL: byName}},
			Secret:    testSecret, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		require.NoError(t, p.Refused(), "nothing refused before a request")
		errs := batchErrors(t, publish(t, p, envelope("named", "a", "1"), envelope("named", "b", "2")), 2)
		for _, err := range errs {
			var refused *heraldwebhook.RefusedDestinationError
			require.ErrorAs(t, err, &refused)
			require.Equal(t, "loopback", refused.Reason)
			require.False(t, herald.IsPermanent(err), "fixing the configuration in time lets the event through")
			require.False(t, herald.IsUnavailable(err), "not an outage: the event's attempt is spent")
			require.NotContains(t, err.Error(), "s3cr3t")
		}
		require.Empty(t, b.rcv.requests(t, nil), "nothing reached the server")

		origin := strings.TrimSuffix(strings.Replace(b.srv.URL, "127.0.0.1", "localhost", 1), "/")
		refused := p.Refused()
		require.Error(t, refused)
		require.Regexp(t, `^heraldwebhook: endpoint `+regexp.QuoteMeta(origin)+` \(Config\.Endpoints\["named"\]\): refusing to connect to \S+ \(loopback address\)`, refused.Error())
		var rde *heraldwebhook.RefusedDestinationError
		require.ErrorAs(t, refused, &rde)
		require.NotContains(t, refused.Error(), "s3cr3t")
		require.Equal(t, 1, strings.Count(logs.String(), "address guard refused"), "logged once, not per event: %s", logs.String())
	})

	t.Run("RefusalsAndAnOutageInOneBatchAreNoOutage", func(t *testing.T) {
		t.Parallel()
		requireLocalhost(t)
		p := newPublisher(t, &heraldwebhook.Config{
			Endpoints: map[string]heraldwebhook.Endpoint{
				"named": {URL: "http://localhost:1/hooks"},
				"down":  {URL: "http://127.0.0.2:1/hooks"},
			},
			Secret: testSecret, AllowedNetworks: []string{"127.0.0.2/32"},
		})
		errs := batchErrors(t, publish(t, p, envelope("named", "a", "1"), envelope("down", "b", "2")), 2)
		var refused *heraldwebhook.RefusedDestinationError
		require.ErrorAs(t, errs[0], &refused)
		require.ErrorIs(t, errs[1], syscall.ECONNREFUSED)
		// Alone, the endpoint that is down is an outage as before.
		err := publish(t, p, envelope("down", "c", "3"))
		var be *herald.BatchError
		require.False(t, errors.As(err, &be), "%v", err)
	})

	t.Run("AllowPrivateTurnsTheGuardOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.publisher(t, &heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: b.url("/hooks")}, Secret: testSecret, AllowPrivate: true})
		require.NoError(t, publish(t, p, envelope("orders", "a", "1")))
		require.NoError(t, p.Refused())
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

func TestOrder(t *testing.T) {
	t.Parallel()

	t.Run("DifferentKeysAreSentInParallel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Each key's request waits for the other's: a publisher that sends
		// one key after the other never gets the first answer.
		arrived := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
		other := map[string]string{"a": "b", "b": "a"}
		b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
			close(arrived[r.key()])
			select {
			case <-arrived[other[r.key()]]:
				return http.StatusOK
			case <-time.After(10 * time.Second): // fails the test, never expected
				return http.StatusInternalServerError
			case <-b.rcv.shutdown:
				return http.StatusInternalServerError
			}
		}
		require.NoError(t, publish(t, b.publisher(t, nil), envelope("orders", "a", "1"), envelope("orders", "b", "2")))
	})

	t.Run("OneKeysEventsAreSentOneAtATimeInBatchOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		inflight := map[string]int{}
		overlap := []string{}
		firstA, firstB := make(chan struct{}), make(chan struct{})
		var onceA, onceB sync.Once
		b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
			mu.Lock()
			inflight[r.key()]++
			if inflight[r.key()] > 1 {
				overlap = append(overlap, r.id())
			}
			mu.Unlock()
			defer func() {
				mu.Lock()
				inflight[r.key()]--
				mu.Unlock()
			}()
			// Hold each key's first request until the other key's first
			// arrives, leaving time for a wrongly parallel publisher to send
			// the key's next event meanwhile.
			switch r.key() {
			case "a":
				onceA.Do(func() { close(firstA) })
				waitFor(b.rcv, firstB)
			case "b":
				onceB.Do(func() { close(firstB) })
				waitFor(b.rcv, firstA)
			}
			return http.StatusOK
		}
		var envs []herald.Envelope
		for i := range 12 {
			envs = append(envs, envelope("orders", []string{"a", "b", "a", "c"}[i%4], strconv.Itoa(i)))
		}
		require.NoError(t, publish(t, b.publisher(t, nil), envs...))
		mu.Lock()
		require.Empty(t, overlap, "no two requests of one key in flight at once")
		mu.Unlock()
		for _, k := range []string{"a", "b", "c"} {
			var want []string
			for _, e := range envs {
				if e.Key == k {
					want = append(want, e.ID)
				}
			}
			require.Equalf(t, want, ids(b.rcv.requests(t, byKey(k))), "key %s arrives in batch order", k)
		}
	})

	t.Run("AFailureHoldsBackTheLaterEventsOfItsKeyOnly", func(t *testing.T) {
		t.Parallel()
		for _, status := range []int{http.StatusUnprocessableEntity, http.StatusServiceUnavailable} {
			b := setup(t)
			envs := []herald.Envelope{
				envelope("orders", "a", "1"), envelope("orders", "b", "1"),
				envelope("orders", "a", "fail"), // 2
				envelope("orders", "b", "2"), envelope("orders", "a", "3"), envelope("orders", "", "keyless"),
				envelope("orders", "a", "4"), envelope("orders", "b", "3"),
			}
			b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
				if string(r.body) == "fail" {
					return status
				}
				return http.StatusOK
			}
			errs := batchErrors(t, publish(t, b.publisher(t, nil), envs...), len(envs))
			require.Error(t, errs[2])
			require.Equal(t, status < 500, herald.IsPermanent(errs[2]))
			for _, i := range []int{4, 6} {
				require.ErrorIs(t, errs[i], herald.ErrHeldBack, "event %d", i)
				require.False(t, herald.IsPermanent(errs[i]), "a held-back event is retried")
			}
			for _, i := range []int{0, 1, 3, 5, 7} {
				require.NoError(t, errs[i], "event %d", i)
			}
			require.Equal(t, []string{envs[0].ID, envs[2].ID}, ids(b.rcv.requests(t, byKey("a"))), "nothing of key a after its failure")
			require.Equal(t, []string{envs[1].ID, envs[3].ID, envs[7].ID}, ids(b.rcv.requests(t, byKey("b"))))
		}
	})

	t.Run("AnUnorderedEventAfterAFailedOneOfItsKeyIsSent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
			if string(r.body) == "fail" {
				return http.StatusServiceUnavailable
			}
			return http.StatusOK
		}
		// The relay does not order this topic: nothing waits for the
		// failed event.
		envs := []herald.Envelope{unordered("orders", "a", "fail"), unordered("orders", "a", "2"), unordered("orders", "a", "3")}
		errs := batchErrors(t, publish(t, b.publisher(t, nil), envs...), len(envs))
		require.Error(t, errs[0])
		require.NotErrorIs(t, errs[0], herald.ErrHeldBack)
		require.NoError(t, errs[1])
		require.NoError(t, errs[2])
		require.ElementsMatch(t, []string{envs[0].ID, envs[1].ID, envs[2].ID}, ids(b.rcv.requests(t, nil)))
	})

	t.Run("MaxConcurrencyBoundsTheRequestsInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const limit, keys = 2, 6
		var mu sync.Mutex
		inflight, most := 0, 0
		arrivals := make(chan struct{}, keys)
		release := make(chan struct{}, keys)
		b.rcv.Respond = func(w http.ResponseWriter, r *request) int {
			mu.Lock()
			inflight++
			most = max(most, inflight)
			mu.Unlock()
			arrivals <- struct{}{}
			waitFor(b.rcv, release)
			mu.Lock()
			inflight--
			mu.Unlock()
			return http.StatusOK
		}
		p := b.publisher(t, &heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: b.url("/hooks")}, Secret: testSecret, AllowedNetworks: loopback, MaxConcurrency: limit,
		})
		var envs []herald.Envelope
		for i := range keys {
			envs = append(envs, envelope("orders", fmt.Sprintf("k%d", i), "{}"))
		}
		done := make(chan error, 1)
		go func() { done <- publish(t, p, envs...) }()
		arrive := func() {
			select {
			case <-arrivals:
			case <-time.After(10 * time.Second):
				t.Fatal("a request did not arrive")
			}
		}
		// Let the limit fill, then let one request finish per arrival.
		for range limit {
			arrive()
		}
		for range keys - limit {
			release <- struct{}{}
			arrive()
		}
		for range limit {
			release <- struct{}{}
		}
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, limit, most, "requests in flight reach MaxConcurrency and never exceed it")
	})
}

// waitFor blocks a handler until ch yields (a receive or a close) or the
// test ends.
func waitFor(rc *receiver, ch <-chan struct{}) {
	select {
	case <-ch:
	case <-rc.shutdown:
	}
}

func TestSecretsStayOut(t *testing.T) {
	t.Parallel()
	const (
		secretPart = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		password   = "p4ssw0rdInURL"
		pathToken  = "PATHTOKEN123"
		queryToken = "QUERYTOKEN456"
	)
	leaks := []string{secretPart, password, pathToken, queryToken}
	requireClean := func(t *testing.T, what, s string) {
		t.Helper()
		for _, leak := range leaks {
			require.NotContainsf(t, s, leak, "%s: %s", what, s)
		}
	}

	b := setup(t)
	b.rcv.Respond = func(http.ResponseWriter, *request) int { return http.StatusInternalServerError }
	var logs testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://user:"+password+"@", 1) + "/hooks/" + pathToken + "?token=" + queryToken
	}
	cfg := &heraldwebhook.Config{
		Endpoints: map[string]heraldwebhook.Endpoint{
			"up":   {URL: withSecrets(b.srv.URL), Secret: testSecret},
			"down": {URL: withSecrets("http://127.0.0.1:1")},
		},
		Secret: testSecret, AllowedNetworks: loopback, Logger: logger,
	}
	p := newPublisher(t, cfg)

	t.Run("PublishErrorsAndLogs", func(t *testing.T) {
		env := envelope("up", "a", "{}")
		env.Headers = map[string]string{"Connection": "close"} // logged as dropped
		errs := batchErrors(t, publish(t, p, env, envelope("down", "b", "{}")), 2)
		requireClean(t, "5xx error", errs[0].Error())
		requireClean(t, "connection error", errs[1].Error())
		requireClean(t, "batch error", (&herald.BatchError{Errs: errs}).Error())
		outage := publish(t, p, envelope("down", "c", "{}"))
		require.Error(t, outage)
		requireClean(t, "outage error", outage.Error())
		requireClean(t, "logs", logs.String())
		require.Contains(t, logs.String(), "dropped a reserved producer header", "the debug logs were written")
	})

	t.Run("StringForms", func(t *testing.T) {
		requireClean(t, "publisher", fmt.Sprint(p))
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			requireClean(t, verb, fmt.Sprintf(verb, *cfg))
			requireClean(t, verb+" pointer", fmt.Sprintf(verb, cfg))
			requireClean(t, verb+" endpoint", fmt.Sprintf(verb, cfg.Endpoints["up"]))
		}
		var js testenv.LogBuffer
		slog.New(slog.NewJSONHandler(&js, nil)).Info("config", "config", *cfg, "endpoint", cfg.Endpoints["up"])
		requireClean(t, "slog JSON", js.String())
		require.Contains(t, fmt.Sprint(*cfg), "127.0.0.1:1", "the origin remains, for the operator")
	})

	t.Run("ConfigErrors", func(t *testing.T) {
		for _, c := range []struct {
			cfg   heraldwebhook.Config
			field string
		}{
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: withSecrets("http://h")}, Secret: "whsec_" + secretPart[:20] + "*"}, "Config.Secret"},
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: withSecrets("http://h")}, Secret: secretPart}, "Config.Secret"},
			{heraldwebhook.Config{Endpoints: map[string]heraldwebhook.Endpoint{"t": {URL: withSecrets("http://h"), Secret: "whsec_" + secretPart[:16]}}}, `Config.Endpoints["t"].Secret`},
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: withSecrets("ftp://h")}, Secret: testSecret}, "Config.Default.URL"},
			{heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: withSecrets("http://h") + "\x7f%zz"}, Secret: testSecret}, "Config.Default.URL"},
		} {
			_, err := heraldwebhook.New(&c.cfg)
			require.Error(t, err)
			require.ErrorContains(t, err, c.field)
			requireClean(t, "config error", err.Error())
		}
	})
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	ok := heraldwebhook.Endpoint{URL: "https://hooks.example/in"}
	for _, c := range []struct {
		cfg   *heraldwebhook.Config
		field string
	}{
		{nil, "Config.Endpoints"},
		{&heraldwebhook.Config{Secret: testSecret}, "Config.Endpoints"},
		{&heraldwebhook.Config{Default: ok}, "Config.Default.Secret"},
		{&heraldwebhook.Config{Default: heraldwebhook.Endpoint{Secret: testSecret}}, "Config.Default.URL: required"},
		{&heraldwebhook.Config{Endpoints: map[string]heraldwebhook.Endpoint{"orders": ok}}, `Config.Endpoints["orders"].Secret`},
		{&heraldwebhook.Config{Endpoints: map[string]heraldwebhook.Endpoint{"": ok}, Secret: testSecret}, "Config.Endpoints"},
		{&heraldwebhook.Config{Default: heraldwebhook.Endpoint{URL: "https:///nohost"}, Secret: testSecret}, "Config.Default.URL"},
		{&heraldwebhook.Config{Default: ok, Secret: testSecret, Timeout: -time.Second}, "Config.Timeout"},
		{&heraldwebhook.Config{Default: ok, Secret: testSecret, MaxConcurrency: -1}, "Config.MaxConcurrency"},
		{&heraldwebhook.Config{Default: ok, Secret: testSecret, AllowedNetworks: []string{"10.0.0.0/8", "10.0.0.1"}}, "Config.AllowedNetworks[1]"},
		{&heraldwebhook.Config{Default: ok, Secret: testSecret, UserAgent: "a\nb"}, "Config.UserAgent"},
	} {
		_, err := heraldwebhook.New(c.cfg)
		require.Error(t, err, "%v", c.cfg)
		require.ErrorContains(t, err, c.field)
	}
	p, err := heraldwebhook.New(&heraldwebhook.Config{Default: ok, Secret: testSecret})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	require.Contains(t, p.String(), "timeout:10s max_concurrency:16", "the defaults")
}
