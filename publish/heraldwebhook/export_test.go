package heraldwebhook

import (
	"net/http"
	"net/netip"
	"time"

	"github.com/herald-outbox/herald"
)

// VerifyAt is Verify with the receiver's clock given, for test vectors.
var VerifyAt = verifyAt

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
