package heraldwebhook

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/herald-outbox/herald"
)

// VerifyAt is Verify with the receiver's clock given, for test vectors.
func VerifyAt(secret string, h http.Header, body []byte, tolerance time.Duration, now time.Time) error {
	return verifyAt([]string{secret}, h, body, tolerance, now)
}

// VerifyAnyAt is VerifyAny with the receiver's clock given.
var VerifyAnyAt = verifyAt

// RefusedReason exposes the default classification of an address.
func RefusedReason(addr netip.Addr) string { return refusedReason(addr.Unmap()) }

// ParseRetryAfter exposes the Retry-After parser.
func ParseRetryAfter(v string, now time.Time) time.Duration { return parseRetryAfter(v, now) }

// Header exposes the request headers of an event, without the signing
// headers, for the fuzz tests.
func (p *Publisher) Header(env *herald.Envelope) (http.Header, error) {
	h, _, err := p.request(env)
	return h, err
}
