package heraldwebhook

import (
	"fmt"
	"net/netip"
	"syscall"
)

// RefusedDestinationError is the error of a connection the publisher
// refused to open because the address it resolved to is private or
// special-purpose (see Config.AllowedNetworks). The check runs on the
// address actually dialled, so a name that resolves, or later rebinds, to
// an internal address is refused too.
//
// A refused destination is a configuration error. An endpoint whose URL
// holds a literal address the guard refuses fails New. An endpoint whose
// host name resolves to one fails each event it should take with a
// retryable error: not an outage (the relay spends the event's attempt
// and backs off, and the event goes to the dead letters after
// RetryPolicy.MaxAttempts or MaxAge), and not permanent (fixing the
// configuration or DNS in time lets it through). Publisher.Refused reports
// such endpoints meanwhile.
type RefusedDestinationError struct {
	Addr   netip.Addr
	Reason string // "loopback", "private", "link-local", ...
	Allow  string // how to allow it (Config.AllowHint)
}

func (e *RefusedDestinationError) Error() string { return "heraldwebhook: " + e.detail() }

func (e *RefusedDestinationError) detail() string {
	return fmt.Sprintf("refusing to connect to %s (%s address): allow it with %s", e.Addr, e.Reason, e.Allow)
}

// endpointRefusedError is a RefusedDestinationError with the endpoint it
// concerns, for New's errors and Publisher.Refused.
type endpointRefusedError struct {
	where string // the Config field, or the origin and the field
	err   *RefusedDestinationError
}

func (e *endpointRefusedError) Error() string {
	return "heraldwebhook: " + e.where + ": " + e.err.detail()
}

func (e *endpointRefusedError) Unwrap() error { return e.err }

// guard decides which addresses the publisher may connect to.
type guard struct {
	allowAll bool
	allowed  []netip.Prefix
	hint     string // Config.AllowHint
}

// control is a net.Dialer Control function: it runs after name
// resolution, on each address the dialer is about to connect to.
func (g *guard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("heraldwebhook: refusing to connect to %q over %s: not an IP address and port", address, network)
	}
	return g.check(ap.Addr())
}

func (g *guard) check(addr netip.Addr) error {
	if r := g.refusal(addr); r != nil {
		return r
	}
	return nil
}

// refusal returns why the guard refuses addr, or nil when it allows it.
func (g *guard) refusal(addr netip.Addr) *RefusedDestinationError {
	addr = addr.WithZone("").Unmap()
	reason := refusedReason(addr)
	if reason == "" || g.allowAll {
		return nil
	}
	for _, p := range g.allowed {
		if p.Contains(addr) {
			return nil
		}
	}
	return &RefusedDestinationError{Addr: addr, Reason: reason, Allow: g.hint}
}

// specialRanges are the special-purpose ranges netip has no predicate for.
var specialRanges = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved or broadcast"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

var (
	nat64  = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4 = netip.MustParsePrefix("2002::/16")
)

// refusedReason returns why addr is refused by default, or "" when it is a
// public address. addr is unmapped.
func refusedReason(addr netip.Addr) string {
	switch {
	case !addr.IsValid():
		return "invalid"
	case addr.IsUnspecified():
		return "unspecified"
	case addr.IsLoopback():
		return "loopback"
	case addr.IsPrivate() && addr.Is4():
		return "private"
	case addr.IsPrivate():
		return "unique-local"
	case addr.IsLinkLocalUnicast():
		return "link-local"
	case addr.IsMulticast():
		return "multicast"
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(addr) {
			return r.reason
		}
	}
	// IPv6 addresses that carry an IPv4 address a gateway connects to:
	// judge the IPv4 address, so 64:ff9b::7f00:1 is loopback.
	b := addr.As16()
	switch {
	case nat64.Contains(addr):
		if r := refusedReason(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return r + " (NAT64)"
		}
	case sixTo4.Contains(addr):
		if r := refusedReason(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
			return r + " (6to4)"
		}
	}
	return ""
}
