package testenv_test

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// echoServer echoes what each connection sends, and closes its side when
// the client closes its own. It counts connections and bytes received, so a
// test sees what reached the server.
type echoServer struct {
	ln       net.Listener
	accepted atomic.Int64
	received atomic.Int64
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    []net.Conn
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{ln: ln}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Go(func() { s.echo(c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *echoServer) echo(c net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		s.received.Add(int64(n))
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			return
		}
	}
}

func dial(t *testing.T, p *testenv.Proxy) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c.(*net.TCPConn)
}

// roundTrip writes msg and reads back as many bytes.
func roundTrip(t *testing.T, c net.Conn, msg []byte) {
	t.Helper()
	_, err := c.Write(msg)
	require.NoError(t, err)
	got := make([]byte, len(msg))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
}

// requireSilent checks that nothing arrives on c for a while: the proof
// that bytes are held or dropped can only be their absence.
func requireSilent(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
}

// requireBroken checks that c was cut: a read fails at once, not by timing
// out.
func requireBroken(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err := io.ReadAll(c)
	if err == nil {
		return // an orderly close: EOF
	}
	require.NotErrorIs(t, err, os.ErrDeadlineExceeded, "the connection hung instead of being cut")
}

func TestProxy(t *testing.T) {
	t.Parallel()

	t.Run("ForwardsEveryByteInOrder", func(t *testing.T) {
		t.Parallel()
		p := testenv.NewProxy(t, startEcho(t).ln.Addr().String())
		c := dial(t, p)
		msg := make([]byte, 1<<20)
		_, _ = rand.Read(msg)
		var got bytes.Buffer
		var wg sync.WaitGroup
		wg.Go(func() { _, _ = io.Copy(&got, c) })
		_, err := c.Write(msg)
		require.NoError(t, err)
		require.NoError(t, c.CloseWrite())
		wg.Wait()
		require.Equal(t, msg, got.Bytes())
	})

	t.Run("ResetCutsOpenConnectionsAndLetsNewOnesThrough", func(t *testing.T) {
		t.Parallel()
		p := testenv.NewProxy(t, startEcho(t).ln.Addr().String())
		c := dial(t, p)
		roundTrip(t, c, []byte("before"))
		require.Equal(t, 1, p.Open())
		p.Reset()
		requireBroken(t, c)
		roundTrip(t, dial(t, p), []byte("after"))
		require.Equal(t, 2, p.Accepted())
	})

	t.Run("RefuseNewResetsNewConnectionsOnly", func(t *testing.T) {
		t.Parallel()
		srv := startEcho(t)
		p := testenv.NewProxy(t, srv.ln.Addr().String())
		old := dial(t, p)
		roundTrip(t, old, []byte("x"))
		p.RefuseNew()
		// The reset can come before connect returns, or at the first read.
		if c, err := net.Dial("tcp", p.Addr()); err == nil {
			defer c.Close()
			requireBroken(t, c)
		}
		roundTrip(t, old, []byte("still forwarded"))
		p.Heal()
		roundTrip(t, dial(t, p), []byte("healed"))
		require.EqualValues(t, 2, srv.accepted.Load(), "the refused connection never reached the server")
	})

	t.Run("BlackholeNewSwallowsBytesUntilHeal", func(t *testing.T) {
		t.Parallel()
		srv := startEcho(t)
		p := testenv.NewProxy(t, srv.ln.Addr().String())
		p.BlackholeNew()
		c := dial(t, p)
		_, err := c.Write([]byte("hello?"))
		require.NoError(t, err)
		requireSilent(t, c)
		require.Zero(t, srv.accepted.Load())
		p.Heal()
		requireBroken(t, c)
		roundTrip(t, dial(t, p), []byte("healed"))
	})

	t.Run("PauseHoldsBytesAndTheEndOfStreamUntilResume", func(t *testing.T) {
		t.Parallel()
		srv := startEcho(t)
		p := testenv.NewProxy(t, srv.ln.Addr().String())
		c := dial(t, p)
		roundTrip(t, c, []byte("x"))
		p.Pause(testenv.Upstream)
		_, err := c.Write([]byte("held"))
		require.NoError(t, err)
		require.NoError(t, c.CloseWrite())
		requireSilent(t, c)
		require.EqualValues(t, 1, srv.received.Load(), "held bytes reached the server")
		p.Resume()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		rest, err := io.ReadAll(c)
		require.NoError(t, err, "the server saw the end of stream and closed")
		require.Equal(t, "held", string(rest))
	})

	t.Run("PauseDownstreamHoldsAnswersOfRequestsTheServerGot", func(t *testing.T) {
		t.Parallel()
		srv := startEcho(t)
		p := testenv.NewProxy(t, srv.ln.Addr().String())
		c := dial(t, p)
		roundTrip(t, c, []byte("x"))
		p.Pause(testenv.Downstream)
		_, err := c.Write([]byte("asked"))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return srv.received.Load() == 6 }, 10*time.Second, time.Millisecond)
		requireSilent(t, c)
		srv.mu.Lock()
		seenAs := srv.conns[0].RemoteAddr().String()
		srv.mu.Unlock()
		require.Equal(t, map[string]int{seenAs: 5}, p.Held(testenv.Downstream),
			"the held answer, under the address the server knows the connection by")
		require.Empty(t, p.Held(testenv.Upstream))
		p.Resume()
		got := make([]byte, 5)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = io.ReadFull(c, got)
		require.NoError(t, err)
		require.Equal(t, "asked", string(got))
		require.Empty(t, p.Held(testenv.BothWays))
	})

	t.Run("LatencyDelaysEachDirection", func(t *testing.T) {
		t.Parallel()
		p := testenv.NewProxy(t, startEcho(t).ln.Addr().String())
		c := dial(t, p)
		roundTrip(t, c, []byte("warm"))
		const d = 100 * time.Millisecond
		p.Latency(d)
		start := time.Now()
		roundTrip(t, c, []byte("slow"))
		// A lower bound only: the delay is the fault; how fast the rest
		// is depends on the machine.
		require.GreaterOrEqual(t, time.Since(start), 2*d, "each direction waits the latency")
		p.Latency(0)
		roundTrip(t, c, []byte("fast again"))
	})

	t.Run("DropDiscardsOneDirection", func(t *testing.T) {
		t.Parallel()
		srv := startEcho(t)
		p := testenv.NewProxy(t, srv.ln.Addr().String())
		c := dial(t, p)
		roundTrip(t, c, []byte("x"))

		p.Drop(testenv.Upstream)
		_, err := c.Write([]byte("lost"))
		require.NoError(t, err)
		requireSilent(t, c)
		p.Heal()
		roundTrip(t, c, []byte("kept"))
		require.EqualValues(t, 5, srv.received.Load(), "the dropped request never reached the server")

		p.Drop(testenv.Downstream)
		_, err = c.Write([]byte("unanswered"))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return srv.received.Load() == 15 }, 10*time.Second, time.Millisecond)
		requireSilent(t, c)
		p.Heal()
		roundTrip(t, c, []byte("answered"))
	})

	t.Run("CloseCutsEveryConnection", func(t *testing.T) {
		t.Parallel()
		p := testenv.NewProxy(t, startEcho(t).ln.Addr().String())
		c := dial(t, p)
		roundTrip(t, c, []byte("x"))
		p.Pause(testenv.BothWays)
		p.Close()
		requireBroken(t, c)
		p.Close()
		_, err := net.Dial("tcp", p.Addr())
		require.Error(t, err, "nothing listens any more")
	})
}
