package testenv

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Direction is which way bytes go through a [Proxy]: a fault applies to
// one direction or to both.
type Direction uint8

const (
	// Upstream is from the client to the server: requests, statements,
	// publishes.
	Upstream Direction = 1 << iota
	// Downstream is from the server to the client: answers, acks.
	Downstream
	// BothWays is Upstream and Downstream.
	BothWays = Upstream | Downstream
)

// proxyChunk is what one read from a connection gave: bytes, or the end of
// the stream (eof: a FIN to pass on; err: the connection broke).
type proxyChunk struct {
	b   []byte
	at  time.Time // when the proxy read it; latency counts from here
	eof bool
	err bool
}

// proxyBuffer is how many reads a direction holds before it stops reading,
// which makes the sender's TCP window fill up as behind a stalled link.
const proxyBuffer = 64

// Proxy is a TCP proxy between a client under test and its server, on a
// random port of 127.0.0.1, with faults a test switches on and off: cut
// every connection, refuse or blackhole new ones, pause the bytes of one
// or both directions (connections held open), add latency, drop the bytes
// of one direction. Faults apply to connections already open and to new
// ones. Without faults it forwards every byte unchanged, in order.
//
// A paused direction holds its end of stream too: a client that gives up
// and closes its socket during a pause is seen closing by the server only
// once the pause ends, as across a network partition.
type Proxy struct {
	target string
	ln     net.Listener

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change of faults
	paused    Direction
	dropped   Direction
	latency   time.Duration
	refuse    bool
	blackhole bool
	links     map[*proxyLink]bool
	holes     map[net.Conn]bool // connections accepted into the blackhole
	accepted  int
	closed    bool

	wg sync.WaitGroup
}

// proxyLink is one proxied connection: the client's and the server's end.
type proxyLink struct {
	client, server *net.TCPConn
	done           chan struct{} // closed when the link is cut
	once           sync.Once
	held           [2]atomic.Int64 // bytes read and not yet delivered: upstream, downstream
}

// heldIndex is the index in proxyLink.held of a single direction.
func heldIndex(d Direction) int {
	if d == Upstream {
		return 0
	}
	return 1
}

// NewProxy starts a proxy to target (host:port) and closes it, with every
// connection through it, when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: proxy: listening: %v", err)
	}
	p := &Proxy{
		target:  target,
		ln:      ln,
		changed: make(chan struct{}),
		links:   map[*proxyLink]bool{},
		holes:   map[net.Conn]bool{},
	}
	p.wg.Add(1)
	go p.acceptLoop()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port, for clients to dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Accepted counts the connections the proxy has accepted so far, so that a
// test can wait for a client to reconnect.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Open counts the connections being forwarded now.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Held reports the connections holding bytes in direction d (paused, or
// waiting out their latency): for each, the proxy's own address toward the
// server, which is the client address the server sees (PostgreSQL's
// pg_stat_activity.client_port), and how many bytes it holds. With both
// directions, the bytes held either way are added up.
func (p *Proxy) Held(d Direction) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for l := range p.links {
		var n int64
		for _, one := range []Direction{Upstream, Downstream} {
			if d&one != 0 {
				n += l.held[heldIndex(one)].Load()
			}
		}
		if n > 0 {
			out[l.server.LocalAddr().String()] = int(n)
		}
	}
	return out
}

// Reset cuts every connection now: both sides get a TCP reset, and bytes
// the proxy held are lost. New connections are forwarded as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links, holes := p.links, p.holes
	p.links, p.holes = map[*proxyLink]bool{}, map[net.Conn]bool{}
	p.mu.Unlock()
	for l := range links {
		l.cut()
	}
	for c := range holes {
		resetConn(c)
	}
}

// RefuseNew makes new connections fail at once: they are accepted and
// reset, so the client's first read or write fails. Open connections are
// left alone.
func (p *Proxy) RefuseNew() { p.set(func() { p.refuse = true }) }

// BlackholeNew makes new connections hang: they are accepted and what the
// client sends is swallowed, with no answer and no connection to the
// server, until Heal or Reset cuts them.
func (p *Proxy) BlackholeNew() { p.set(func() { p.blackhole = true }) }

// Pause stops forwarding in the given directions: bytes and ends of stream
// are held, connections stay open, and new connections are paused too.
// Resume or Heal delivers what was held, in order.
func (p *Proxy) Pause(d Direction) { p.set(func() { p.paused |= d }) }

// Resume ends every pause.
func (p *Proxy) Resume() { p.set(func() { p.paused = 0 }) }

// Drop discards, until Heal, the bytes going in the given directions. The
// connections stay open; a client's protocol stream loses its data
// silently, as when a server's answers never come back.
func (p *Proxy) Drop(d Direction) { p.set(func() { p.dropped |= d }) }

// Latency delays every chunk of bytes, both ways, by d from when the proxy
// read it. Zero removes the delay.
func (p *Proxy) Latency(d time.Duration) { p.set(func() { p.latency = d }) }

// Heal ends every fault: pauses end (held bytes go on), drops and latency
// stop, new connections are forwarded again, and blackholed connections
// are reset so that their clients dial again.
func (p *Proxy) Heal() {
	var holes map[net.Conn]bool
	p.set(func() {
		p.paused, p.dropped, p.latency, p.refuse, p.blackhole = 0, 0, 0, false, false
		holes, p.holes = p.holes, map[net.Conn]bool{}
	})
	for c := range holes {
		resetConn(c)
	}
}

// Close stops the proxy and cuts every connection. It is safe to call more
// than once.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

// set changes the faults and wakes every connection's forwarders to look
// at them again.
func (p *Proxy) set(change func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	change()
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		p.accepted++
		refuse, blackhole, closed := p.refuse, p.blackhole, p.closed
		if blackhole && !refuse && !closed {
			p.holes[c] = true
		}
		p.mu.Unlock()
		switch {
		case refuse || closed:
			resetConn(c)
		case blackhole:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				_, _ = io.Copy(io.Discard, c)
			}()
		default:
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.link(c.(*net.TCPConn))
			}()
		}
	}
}

// link dials the server for a new client connection and forwards both ways
// until both directions ended or the link is cut.
func (p *Proxy) link(client *net.TCPConn) {
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		// As the server would: the client sees its connection reset.
		resetConn(client)
		return
	}
	l := &proxyLink{client: client, server: s.(*net.TCPConn), done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.cut()
		return
	}
	p.links[l] = true
	p.mu.Unlock()

	var dirs sync.WaitGroup
	dirs.Go(func() { p.forward(l, l.client, l.server, Upstream) })
	dirs.Go(func() { p.forward(l, l.server, l.client, Downstream) })
	dirs.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.close()
}

// forward copies one direction: a reader fills a bounded queue, and the
// writer empties it as the faults allow.
func (p *Proxy) forward(l *proxyLink, from, to *net.TCPConn, dir Direction) {
	queue := make(chan proxyChunk, proxyBuffer)
	held := &l.held[heldIndex(dir)]
	go func() {
		defer close(queue)
		for {
			buf := make([]byte, 32<<10)
			n, err := from.Read(buf)
			if n > 0 {
				held.Add(int64(n))
				select {
				case queue <- proxyChunk{b: buf[:n], at: time.Now()}:
				case <-l.done:
					return
				}
			}
			if err != nil {
				end := proxyChunk{at: time.Now(), eof: errors.Is(err, io.EOF), err: !errors.Is(err, io.EOF)}
				select {
				case queue <- end:
				case <-l.done:
				}
				return
			}
		}
	}()
	for c := range queue {
		if !p.deliver(l, to, dir, c, held) {
			// The link is cut; the reader sees it and ends, closing queue.
			for range queue {
			}
			return
		}
	}
}

// deliver writes one chunk once no pause holds it and its latency has
// passed, or discards it while its direction is dropped. It returns false
// when the direction is over: the link was cut, a write failed, or the
// chunk was the end of the stream.
func (p *Proxy) deliver(l *proxyLink, to *net.TCPConn, dir Direction, c proxyChunk, held *atomic.Int64) bool {
	for {
		p.mu.Lock()
		paused, dropped, latency, changed := p.paused&dir != 0, p.dropped&dir != 0, p.latency, p.changed
		p.mu.Unlock()
		var due time.Duration // how long the chunk still waits; 0 while paused: until the faults change
		switch {
		case paused:
		case dropped && len(c.b) > 0:
			held.Add(-int64(len(c.b)))
			return true
		default:
			if due = time.Until(c.at.Add(latency)); due <= 0 {
				held.Add(-int64(len(c.b)))
				return p.write(l, to, c)
			}
		}
		if !p.await(l, changed, due) {
			return false
		}
	}
}

// await waits until the faults change, d passes (when positive) or the
// link is cut, which it reports with false.
func (p *Proxy) await(l *proxyLink, changed <-chan struct{}, d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-changed:
	case <-timeout:
	case <-l.done:
		return false
	}
	return true
}

func (p *Proxy) write(l *proxyLink, to *net.TCPConn, c proxyChunk) bool {
	switch {
	case c.err:
		// The other side broke its connection: break this one too.
		l.cut()
		return false
	case c.eof:
		_ = to.CloseWrite()
		return false
	}
	if _, err := to.Write(c.b); err != nil {
		l.cut()
		return false
	}
	return true
}

// cut resets both ends of the link; it is safe to call more than once.
func (l *proxyLink) cut() {
	l.once.Do(func() {
		close(l.done)
		resetConn(l.client)
		resetConn(l.server)
	})
}

// close ends a link whose both directions ended with an orderly close: no
// reset, which could discard bytes the client has not read yet.
func (l *proxyLink) close() {
	l.once.Do(func() {
		close(l.done)
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// resetConn closes c with a TCP reset instead of an orderly close, as a
// broken network or a crashed peer does.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
