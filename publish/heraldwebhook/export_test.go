package heraldwebhook

import (
	"net/netip"
	"time"
)

// VerifyAt is Verify with the receiver's clock given, for test vectors.
var VerifyAt = verifyAt

// RefusedReason exposes the default classification of an address.
func RefusedReason(addr netip.Addr) string { return refusedReason(addr.Unmap()) }

// ParseRetryAfter exposes the Retry-After parser.
func ParseRetryAfter(v string, now time.Time) time.Duration { return parseRetryAfter(v, now) }
