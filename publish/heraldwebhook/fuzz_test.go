package heraldwebhook_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// fuzzKey turns fuzz bytes into a signing secret: the bytes themselves
// when they are a key of an allowed size, else a key derived from them.
func fuzzKey(b []byte) string {
	if len(b) < 24 || len(b) > 64 {
		sum := sha256.Sum256(b)
		b = sum[:]
	}
	return heraldwebhook.SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

func signedHeader(id, ts, sig string) http.Header {
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", ts)
	h.Set("webhook-signature", sig)
	return h
}

// What a sender signs with the secret verifies; the same request under
// another secret, or changed in any of its signed parts, does not.
func FuzzVerify(f *testing.F) {
	f.Add([]byte("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), vectorID, int64(0), []byte(vectorBody), uint16(3))
	f.Add([]byte("short"), herald.NewID(), int64(-299), []byte{}, uint16(0))
	f.Add(bytes.Repeat([]byte{0xff}, 64), "id with spaces", int64(299), []byte{0, 1, 2}, uint16(1))
	f.Add([]byte{}, "évènement", int64(17), []byte("x"), uint16(9))
	f.Fuzz(func(t *testing.T, key []byte, id string, offset int64, body []byte, at uint16) {
		if strings.TrimSpace(id) == "" || strings.ContainsAny(id, "\r\n") {
			// A header value that a request cannot carry.
			return
		}
		const tolerance = 5 * time.Minute
		secret := fuzzKey(key)
		ts := strconv.FormatInt(vectorTime.Unix()+offset%300, 10)
		sig := sign(t, secret, id, ts, body)

		require.NoError(t, heraldwebhook.VerifyAt(secret, signedHeader(id, ts, sig), body, tolerance, vectorTime))

		if secret != otherSecret {
			require.ErrorIs(t, heraldwebhook.VerifyAt(otherSecret, signedHeader(id, ts, sig), body, tolerance, vectorTime), heraldwebhook.ErrSignature)
		}
		if len(body) > 0 {
			changed := bytes.Clone(body)
			changed[int(at)%len(changed)] ^= 0x01
			require.ErrorIs(t, heraldwebhook.VerifyAt(secret, signedHeader(id, ts, sig), changed, tolerance, vectorTime), heraldwebhook.ErrSignature)
		}
		require.ErrorIs(t, heraldwebhook.VerifyAt(secret, signedHeader(id, ts, sig), append(bytes.Clone(body), 'x'), tolerance, vectorTime), heraldwebhook.ErrSignature)
		require.ErrorIs(t, heraldwebhook.VerifyAt(secret, signedHeader(id+"x", ts, sig), body, tolerance, vectorTime), heraldwebhook.ErrSignature)
		later := strconv.FormatInt(vectorTime.Unix()+offset%300+1, 10)
		require.ErrorIs(t, heraldwebhook.VerifyAt(secret, signedHeader(id, later, sig), body, tolerance, vectorTime), heraldwebhook.ErrSignature)

		// A signature older or newer than the tolerance is refused, however
		// valid.
		stale := strconv.FormatInt(vectorTime.Unix()-301-(offset&0xffff), 10)
		require.ErrorIs(t, heraldwebhook.VerifyAt(secret, signedHeader(id, stale, sign(t, secret, id, stale, body)), body, tolerance, vectorTime), heraldwebhook.ErrTimestamp)
	})
}

// Whatever a request carries, Verify accepts it only when one v1 entry of
// its webhook-signature is the signature of its id, timestamp and body
// under the secret, and its errors never repeat the secret.
func FuzzVerifyRequest(f *testing.F) {
	f.Add(vectorID, vectorTimestamp, vectorSignature, []byte(vectorBody))
	f.Add(vectorID, vectorTimestamp, "v1a,AAAA "+vectorSignature, []byte(vectorBody))
	f.Add(vectorID, vectorTimestamp, "v1,"+strings.TrimPrefix(vectorSignature, "v1,")[:20], []byte(vectorBody))
	f.Add(vectorID, vectorTimestamp, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE", []byte(vectorBody))
	f.Add(vectorID, "+1614265330", vectorSignature, []byte(vectorBody))
	f.Add(vectorID, "01614265330", vectorSignature, []byte(vectorBody))
	f.Add("", vectorTimestamp, vectorSignature, []byte(vectorBody))
	f.Add(vectorID, "-9223372036854775808", "v1,", []byte{})
	f.Add(vectorID, "9223372036854775807", "v2,abc\tv1,x,y", []byte{})
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		err := heraldwebhook.VerifyAt(vectorSecret, signedHeader(id, ts, sigs), body, time.Minute, vectorTime)
		if err != nil {
			require.NotContains(t, err.Error(), strings.TrimPrefix(vectorSecret, heraldwebhook.SecretPrefix))
			return
		}
		sec, perr := strconv.ParseInt(ts, 10, 64)
		require.NoError(t, perr, "accepted a timestamp that is not unix seconds: %q", ts)
		require.InDelta(t, vectorTime.Unix(), sec, 60, "accepted a timestamp out of tolerance")
		want, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(sign(t, vectorSecret, id, ts, body), "v1,"))
		found := false
		for _, entry := range strings.Fields(sigs) {
			if b64, ok := strings.CutPrefix(entry, "v1,"); ok {
				got, derr := base64.StdEncoding.DecodeString(b64)
				found = found || (derr == nil && bytes.Equal(got, want))
			}
		}
		require.True(t, found, "accepted %q without the signature of its id, timestamp and body", sigs)
	})
}

// secretErrors are the only things Verify and New say of a bad secret:
// none quotes it.
var secretErrors = regexp.MustCompile(`^heraldwebhook: (Config\.Default\.Secret is required, or set Config\.Secret|(Verify: secret|Config\.Secret) (is required|must start with "whsec_" \(a Standard Webhooks secret\)|is not valid base64 after "whsec_"|must decode to a key of 24 to 64 bytes, not \d+))$`)

// A secret that cannot be used is refused without being echoed; one that
// can is accepted by both New and Verify.
func FuzzSecret(f *testing.F) {
	f.Add(vectorSecret)
	f.Add("")
	f.Add("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	f.Add("whsec_SECRETPART*not*base64*at*all")
	f.Add("whsec_U0VDUkVUUEFSVA==")
	f.Add("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw====")
	f.Add("whsec_" + strings.Repeat("A", 88))
	f.Add("whsec_" + strings.Repeat("A", 86))
	f.Fuzz(func(t *testing.T, secret string) {
		verr := heraldwebhook.VerifyAt(secret, vectorHeader(vectorSignature), []byte(vectorBody), time.Minute, vectorTime)
		p, nerr := heraldwebhook.New(&heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: "https://hooks.example.com/in"}, Secret: secret,
			Logger: slog.New(slog.DiscardHandler),
		})
		if nerr != nil {
			require.Regexp(t, secretErrors, nerr.Error())
			require.Error(t, verr, "New refused the secret, Verify took it")
			require.Regexp(t, secretErrors, verr.Error())
			return
		}
		require.NoError(t, p.Close())
		if verr != nil {
			require.ErrorIs(t, verr, heraldwebhook.ErrSignature, "New took the secret, Verify refused it: %v", verr)
		}
	})
}

// endpointErrors are the only things New says of a bad endpoint URL: it
// never repeats the URL, whose user information, path or query may hold a
// credential. A literal address the guard refuses is named, with the reason.
var endpointErrors = regexp.MustCompile(`^heraldwebhook: Config\.Default\.URL: (required|not a valid URL|the scheme must be http or https|a host is required|` +
	`refusing to connect to [0-9a-f.:]+ \(.+ address\): allow it with Config\.AllowedNetworks or Config\.AllowPrivate)$`)

// endpointString is how an Endpoint shows its URL: the origin only.
var endpointString = regexp.MustCompile(`^\{URL:(""|\(invalid URL\)|([a-z][a-z0-9+.-]*)?://[^/?#@]*) Secret:set\}$`)

func FuzzEndpointURL(f *testing.F) {
	f.Add("https://hooks.example.com/in?token=abc")
	f.Add("https://user:hunter2@hooks.example.com:8443/in")
	f.Add("http://[::1]:80/x#frag")
	f.Add("ftp://user:hunter2@host/")
	f.Add("https:///path/only")
	f.Add("https://user:pa%zzss@host/")
	f.Add("https://a@b@c/")
	f.Add("//host/path")
	f.Add("")
	f.Add(" https://host/ ")
	f.Fuzz(func(t *testing.T, raw string) {
		ep := heraldwebhook.Endpoint{URL: raw, Secret: vectorSecret}
		require.Regexp(t, endpointString, ep.String())
		p, err := heraldwebhook.New(&heraldwebhook.Config{Default: ep, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			require.Regexp(t, endpointErrors, err.Error())
			return
		}
		defer p.Close()
		require.NotContains(t, p.String(), "://", "the publisher's String shows no URL")
	})
}

// A Retry-After value from an endpoint becomes a delay that is never
// negative: delay-seconds exactly (capped at a year), an HTTP-date as the
// time until then.
func FuzzParseRetryAfter(f *testing.F) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, v := range []string{"", "0", "-5", "7", " 30 ", "soon", "Sun, 01 Mar 2026 12:01:30 GMT",
		"Sun, 01 Mar 2026 11:00:00 GMT", "99999999999999999999", "9999999999", "Sunday, 01-Mar-26 12:01:30 GMT",
		"Sun Mar  1 12:01:30 2026", "+5", "1e3", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		f.Add(v, now.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		now := time.Unix(nowUnix, 0)
		d := heraldwebhook.ParseRetryAfter(v, now)
		require.GreaterOrEqual(t, d, time.Duration(0))
		if secs, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			require.Equal(t, time.Duration(max(0, min(secs, 366*24*3600)))*time.Second, d)
			return
		}
		if at, err := http.ParseTime(strings.TrimSpace(v)); err == nil && at.After(now) {
			require.Equal(t, at.Sub(now), d)
			return
		}
		require.Zero(t, d)
	})
}

// The request of an event a Writer accepted carries the event's fields in
// its Herald-* headers and the producer's headers as they were, but for
// the names the package doc lists as dropped; a value no request can carry
// fails the event instead of being sent altered.
func FuzzRequestHeaders(f *testing.F) {
	id := uuid.MustParse(vectorTestID)
	f.Add(id[:], "orders", "order-42", "order.placed", "order", "42", "X-Tenant", "acme", "traceparent", "00-abc-01")
	f.Add(id[:], "t", "", "", "", "", "Content-Type", "text/plain", "User-Agent", "spoofed")
	f.Add(id[:], "t", "k\x01", "type\ttab", "", "", "Expect", "100-continue", "Proxy-Foo", "x")
	f.Add(id[:], "t", "é", "", "", "", "x-a", "1", "X-B", "2\x7f")
	f.Fuzz(func(t *testing.T, idBytes []byte, topic, key, typ, aggType, aggID, name1, value1, name2, value2 string) {
		if len(idBytes) != 16 || strings.EqualFold(name1, name2) {
			// Two names that differ only in case are one HTTP header.
			return
		}
		msgs, err := herald.Prepare([]herald.Message{{
			ID: uuid.UUID(idBytes).String(), Topic: topic, Key: key, Type: typ, AggregateType: aggType, AggregateID: aggID,
			Headers: map[string]string{name1: value1, name2: value2},
		}}, 0)
		if err != nil {
			return
		}
		env := herald.Envelope{Message: msgs[0], Attempt: 1}
		p, err := heraldwebhook.New(&heraldwebhook.Config{
			Default: heraldwebhook.Endpoint{URL: "https://hooks.example.com/in"}, Secret: vectorSecret,
			Logger: slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		defer p.Close()

		h, err := p.Header(&env)
		fields := []struct{ name, v string }{
			{herald.HeaderID, env.ID}, {herald.HeaderTopic, env.Topic}, {herald.HeaderKey, env.Key},
			{herald.HeaderType, env.Type}, {herald.HeaderAggregateType, env.AggregateType}, {herald.HeaderAggregateID, env.AggregateID},
		}
		sendable := true
		for _, fd := range fields {
			sendable = sendable && carriable(fd.v)
		}
		for name, v := range env.Headers {
			sendable = sendable && (droppedByWebhook(name) || carriable(v))
		}
		if !sendable {
			require.Error(t, err)
			return
		}
		require.NoError(t, err)
		for _, fd := range fields {
			require.Equal(t, fd.v, h.Get(fd.name), fd.name)
		}
		for name, v := range env.Headers {
			if droppedByWebhook(name) {
				continue
			}
			require.Equal(t, []string{v}, h.Values(name), "producer header %q", name)
		}
		require.Equal(t, "herald-webhook", h.Get("User-Agent"))
	})
}

// vectorTestID is a fixed event id for seeds.
const vectorTestID = "0190d5a3-7c1e-7b4a-9f00-0123456789ab"

// carriable reports whether an HTTP request can carry v as a header value:
// net/http refuses control characters other than tab.
func carriable(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// droppedByWebhook reports whether the package doc says a producer header
// of this name is not sent. Only the names a Writer accepts are asked.
func droppedByWebhook(name string) bool {
	switch http.CanonicalHeaderKey(name) {
	case "Expect", "User-Agent", "Keep-Alive", "Content-Length", "Host":
		return true
	}
	return strings.HasPrefix(strings.ToLower(name), "proxy-")
}
