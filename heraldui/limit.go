package heraldui

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// rate is a token bucket's shape: burst tries at once, then one more every
// interval.
type rate struct {
	burst int
	every time.Duration
}

// The limits on wrong admin tokens (login form or bearer header). A client
// address gets a few tries; all clients together get more, so that an
// attacker has to spread over many addresses to lock out an operator
// elsewhere, and even then guesses stay at the global rate.
var (
	perClientRate = rate{burst: 5, every: 12 * time.Second} // 5 a minute
	globalRate    = rate{burst: 30, every: 2 * time.Second} // 30 a minute
)

// bucket is a token bucket: tokens at the time at. The zero bucket is full.
type bucket struct {
	spent float64 // tokens missing from a full bucket, at the time at
	at    time.Time
}

// missing returns the tokens missing at now, refill included.
func (b *bucket) missing(r rate, now time.Time) float64 {
	if b.at.IsZero() {
		return 0
	}
	return max(0, b.spent-float64(now.Sub(b.at))/float64(r.every))
}

// wait returns how long until the bucket holds a whole token again; zero
// when it holds one now.
func (b *bucket) wait(r rate, now time.Time) time.Duration {
	short := b.missing(r, now) - float64(r.burst-1)
	if short <= 0 {
		return 0
	}
	return time.Duration(short * float64(r.every))
}

// take spends one token and reports whether the bucket is now empty.
func (b *bucket) take(r rate, now time.Time) bool {
	b.spent = min(float64(r.burst), b.missing(r, now)+1)
	b.at = now
	return b.wait(r, now) > 0
}

// loginLimiter counts wrong tokens per client and overall. Only wrong
// tokens spend; a right one, while tries are left, always gets in.
type loginLimiter struct {
	mu      sync.Mutex
	global  bucket
	clients map[netip.Prefix]*bucket
}

// pruneAt is the number of client buckets above which full ones are
// dropped. A client's bucket exists only after a wrong token, and wrong
// tokens are bounded by the global rate, so the map stays small.
const pruneAt = 64

// wait returns how long the client at remoteAddr must wait before it may
// present a token; zero when it may now.
func (l *loginLimiter) wait(remoteAddr string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.global.wait(globalRate, now)
	if b := l.clients[clientOf(remoteAddr)]; b != nil {
		d = max(d, b.wait(perClientRate, now))
	}
	return d
}

// failed spends a try of the client at remoteAddr and a global one. It
// reports whether that used up the client's or everyone's tries.
func (l *loginLimiter) failed(remoteAddr string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.clients == nil {
		l.clients = map[netip.Prefix]*bucket{}
	}
	if len(l.clients) >= pruneAt {
		for c, b := range l.clients {
			if b.missing(perClientRate, now) == 0 {
				delete(l.clients, c)
			}
		}
	}
	c := clientOf(remoteAddr)
	b := l.clients[c]
	if b == nil {
		b = &bucket{}
		l.clients[c] = b
	}
	clientOut := b.take(perClientRate, now)
	return l.global.take(globalRate, now) || clientOut
}

// clientOf returns the address a client's tries are counted under: its IP,
// or for IPv6 its /64, which one host usually holds whole.
func clientOf(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{} // unknown: one shared bucket
	}
	addr = addr.Unmap().WithZone("")
	if addr.Is6() {
		p, _ := addr.Prefix(64)
		return p
	}
	return netip.PrefixFrom(addr, 32)
}
