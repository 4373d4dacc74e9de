package heraldwebhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Names of the Standard Webhooks headers every request carries.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// SecretPrefix starts every signing secret: the Standard Webhooks
// serialization of an HMAC key is "whsec_" followed by the key in base64.
const SecretPrefix = "whsec_"

// Bounds on the decoded signing key, from the Standard Webhooks
// specification: at least 192 bits, at most 512.
const (
	minKeyBytes = 24
	maxKeyBytes = 64
)

// DefaultTolerance is how far a webhook-timestamp may be from the
// receiver's clock when Verify is given no tolerance.
const DefaultTolerance = 5 * time.Minute

// Errors Verify returns, wrapped with the detail.
var (
	// ErrMissingHeader: a webhook-* header is absent or empty.
	ErrMissingHeader = errors.New("heraldwebhook: missing webhook header")
	// ErrTimestamp: the webhook-timestamp is not an integer, or is further
	// from now than the tolerance (a replay, or a badly wrong clock).
	ErrTimestamp = errors.New("heraldwebhook: webhook-timestamp out of tolerance")
	// ErrSignature: no v1 signature of the header matches the request.
	ErrSignature = errors.New("heraldwebhook: no matching webhook signature")
)

// parseSecret decodes a "whsec_" secret into its HMAC key. Its errors never
// contain the secret; field names the setting for the message. They never
// put a colon after the field either: herald.Scrub, which every logged
// error goes through, takes the word after "Secret:" for a secret and
// hides it, which would leave "Secret: xxxxx start with...".
func parseSecret(field, secret string) ([]byte, error) {
	if secret == "" {
		return nil, fmt.Errorf("%s is required", field)
	}
	b64, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("%s must start with %q (a Standard Webhooks secret)", field, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		// The padding is optional in practice; accept a secret without it.
		key, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil {
		// base64's error quotes the offending byte position only, but say
		// nothing of the input at all.
		return nil, fmt.Errorf("%s is not valid base64 after %q", field, SecretPrefix)
	}
	if len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return nil, fmt.Errorf("%s must decode to a key of %d to %d bytes, not %d", field, minKeyBytes, maxKeyBytes, len(key))
	}
	return key, nil
}

// mac returns the HMAC-SHA256 of "id.timestamp.body" under key.
func mac(key []byte, id, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// signature returns the webhook-signature value of one request: a v1
// signature under each key, space-separated, the current key's first.
func signature(keys [][]byte, id, timestamp string, body []byte) string {
	sigs := make([]string, len(keys))
	for i, key := range keys {
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(mac(key, id, timestamp, body))
	}
	return strings.Join(sigs, " ")
}

// Verify checks a webhook request as a receiver: that its webhook-signature
// holds a v1 signature of its webhook-id, webhook-timestamp and body under
// secret (a "whsec_" secret, as given to the publisher), and that its
// timestamp is within tolerance of now, in either direction, which bounds
// replays. A tolerance of zero or less means DefaultTolerance.
//
// body must be the raw bytes of the request body, before any JSON decoding.
// The comparison is in constant time. Signatures of other schemes in the
// header (v1a, ...) are ignored, so a signature list sent during a key
// rotation verifies when one entry matches.
//
// After Verify, use webhook-id (the Herald event id) to drop duplicates:
// delivery is at least once.
func Verify(secret string, h http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt([]string{secret}, h, body, tolerance, time.Now())
}

// VerifyAny is Verify for a receiver that holds two secrets or more during
// a rotation (its current one and the one it is moving to): the request
// verifies when one v1 signature of its header matches one of secrets. A
// publisher in the middle of a rollover (Endpoint.PreviousSecret) sends a
// signature under each of its secrets, so a receiver on either side of
// the rollover accepts its requests. Every secret must be valid; at least
// one is required.
func VerifyAny(secrets []string, h http.Header, body []byte, tolerance time.Duration) error {
	return verifyAt(secrets, h, body, tolerance, time.Now())
}

func verifyAt(secrets []string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	if len(secrets) == 0 {
		return errors.New("heraldwebhook: Verify: a secret is required")
	}
	keys := make([][]byte, 0, len(secrets))
	for i, secret := range secrets {
		field := "heraldwebhook: Verify: secret"
		if len(secrets) > 1 {
			field = fmt.Sprintf("heraldwebhook: VerifyAny: secret %d", i+1)
		}
		key, err := parseSecret(field, secret)
		if err != nil {
			return err
		}
		keys = append(keys, key)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	id, ts, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	for _, f := range [...]struct{ name, v string }{
		{HeaderWebhookID, id}, {HeaderWebhookTimestamp, ts}, {HeaderWebhookSignature, sigs},
	} {
		if f.v == "" {
			return fmt.Errorf("%w: %s", ErrMissingHeader, f.name)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %q is not unix seconds", ErrTimestamp, ts)
	}
	sent := time.Unix(sec, 0)
	if d := now.Sub(sent); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: sent at %s, %s from now, tolerance %s", ErrTimestamp, sent.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	var got [][]byte
	for _, s := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue
		}
		if sig, err := base64.StdEncoding.DecodeString(b64); err == nil {
			got = append(got, sig)
		}
	}
	for _, key := range keys {
		want := mac(key, id, ts, body)
		for _, sig := range got {
			if hmac.Equal(sig, want) {
				return nil
			}
		}
	}
	return ErrSignature
}
