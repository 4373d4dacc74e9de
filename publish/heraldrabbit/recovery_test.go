package heraldrabbit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// The broker closes the publisher's connection, as it does on a restart or
// when an operator closes it: events published before and after all
// arrive, on a new connection. Only this test's connection is closed.
func TestBrokerClosesTheConnection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctl, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		unavailable(t, "rabbitmqctl is not installed: cannot close a connection from the broker's side")
	}
	q := b.queue(t, "orders", nil)
	var logs testenv.LogBuffer
	name := b.prefix + "publisher"
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	p := b.publisherOf(t, dialer(t, brokerURL, amqp.Config{Properties: props}),
		&heraldrabbit.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	before := []herald.Envelope{envelope("orders", "k"), envelope("orders", "k"), envelope("orders", "j")}
	require.NoError(t, p.Publish(t.Context(), before))

	closeConnection(t, ctl, name)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "connection to RabbitMQ lost") },
		10*time.Second, 10*time.Millisecond, "the publisher saw its connection close")
	require.Contains(t, logs.String(), "CONNECTION_FORCED")

	after := []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")}
	require.NoError(t, p.Publish(t.Context(), after), "the next Publish connects again")
	require.Equal(t, 2, strings.Count(logs.String(), "connected to RabbitMQ"), "a second connection")
	got := b.read(t, q, len(before)+len(after))
	require.ElementsMatch(t, envIDs(append(before, after...)...), parsedIDs(t, got), "each event once")
	require.Equal(t, envIDs(before[0], before[1], after[0]), parsedIDs(t, ofKey(t, got, "k")), "key k in order")
}

// closeConnection closes, from the broker's side, the connection whose
// connection_name is name.
func closeConnection(t *testing.T, ctl, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, ctl, "-q", "list_connections", "--no-table-headers", "pid", "client_properties").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var pid string
	for line := range strings.Lines(string(out)) {
		if strings.Contains(line, fmt.Sprintf(`{"connection_name",%q}`, name)) {
			pid, _, _ = strings.Cut(line, "\t")
		}
	}
	require.NotEmpty(t, pid, "no connection named %s in:\n%s", name, out)
	out, err = exec.CommandContext(ctx, ctl, "-q", "close_connection", pid, "herald test: simulated restart").CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// A broker that cannot be reached (here: a proxy in front of it that stops
// accepting and drops its connections) fails every Publish with an error,
// never nil, and the publisher reconnects once it is back.
func TestPublishDuringAnOutage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue(t, "orders", nil)
	px := startProxy(t)
	p := b.publisherOf(t, dialer(t, "amqp://guest:guest@"+px.addr+"/", amqp.Config{}), &heraldrabbit.Config{
		ReconnectMinDelay: 10 * time.Millisecond,
		ReconnectMaxDelay: 50 * time.Millisecond,
	})
	publish := func(batch []herald.Envelope) error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return p.Publish(ctx, batch)
	}

	before := []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")}
	require.NoError(t, publish(before))

	px.down(t)
	during := []herald.Envelope{envelope("orders", "k"), envelope("orders", "j")}
	for attempt := range 5 {
		err := publish(during)
		require.Errorf(t, err, "attempt %d during the outage", attempt)
		var be *herald.BatchError
		require.Falsef(t, errors.As(err, &be), "an outage fails the batch as a whole: %v", err)
		require.False(t, herald.IsPermanent(err))
	}

	px.up(t)
	// As the relay does: the batch again until it is confirmed.
	require.Eventually(t, func() bool { return publish(during) == nil }, 10*time.Second, 20*time.Millisecond,
		"the publisher reconnects once the broker is reachable")
	after := []herald.Envelope{envelope("orders", "k")}
	require.NoError(t, publish(after))

	want := envIDs(append(append(before, during...), after...)...)
	require.Equal(t, want, parsedIDs(t, b.read(t, q, len(want))), "each event once, in order")
}

// A broker that stops answering (a proxy that stops forwarding) cannot hold
// Publish past its context; the publisher works again once it answers.
func TestContextEndsTheWaitForASilentBroker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.queue(t, "orders", nil)
	px := startProxy(t)
	p := b.publisherOf(t, dialer(t, "amqp://guest:guest@"+px.addr+"/", amqp.Config{}), nil)
	require.NoError(t, p.Connect(t.Context()))

	px.pause()
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	batch := []herald.Envelope{envelope("orders", "k"), envelope("orders", "k"), envelope("orders", "j")}
	start := time.Now()
	err := p.Publish(ctx, batch)
	require.Less(t, time.Since(start), 2*time.Second, "Publish returns soon after its deadline")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	px.resume()
	after := []herald.Envelope{envelope("orders", "k")}
	require.NoError(t, p.Publish(t.Context(), after))
	// The first round of the unconfirmed batch (the first event of each
	// key) reached the broker once it answered again; the second round
	// was never sent. The relay publishes the batch again: at least once.
	require.Equal(t, envIDs(batch[0], batch[2], after[0]), parsedIDs(t, b.read(t, q, 3)))
}

// proxy forwards TCP connections to the machine's RabbitMQ. It can refuse
// and drop connections (down, up) or hold their bytes (pause, resume).
type proxy struct {
	addr string

	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	gate   chan struct{} // closed while bytes flow
	wg     sync.WaitGroup
	closed bool
}

func startProxy(t *testing.T) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	px := &proxy{addr: ln.Addr().String(), gate: make(chan struct{})}
	close(px.gate)
	px.serve(ln)
	t.Cleanup(func() {
		px.mu.Lock()
		px.closed = true
		px.mu.Unlock()
		px.resume()
		px.drop()
		px.wg.Wait()
	})
	return px
}

func (px *proxy) serve(ln net.Listener) {
	px.mu.Lock()
	px.ln = ln
	px.mu.Unlock()
	px.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", "127.0.0.1:5672")
			if err != nil {
				_ = c.Close()
				continue
			}
			px.mu.Lock()
			if px.closed {
				px.mu.Unlock()
				_ = c.Close()
				_ = up.Close()
				return
			}
			px.conns = append(px.conns, c, up)
			px.mu.Unlock()
			px.wg.Go(func() { px.pipe(up, c) })
			px.wg.Go(func() { px.pipe(c, up) })
		}
	})
}

// pipe copies from src to dst while the gate is open, and closes both ends
// when either fails.
func (px *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			px.mu.Lock()
			gate := px.gate
			px.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF, a reset, or a connection the proxy dropped
		}
	}
}

// down stops accepting (dials are refused) and drops every connection.
func (px *proxy) down(t *testing.T) {
	t.Helper()
	px.mu.Lock()
	ln := px.ln
	px.mu.Unlock()
	require.NoError(t, ln.Close())
	px.drop()
}

// up accepts again, on the same address.
func (px *proxy) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", px.addr)
	require.NoError(t, err)
	px.serve(ln)
}

func (px *proxy) drop() {
	px.mu.Lock()
	conns := px.conns
	px.conns = nil
	ln := px.ln
	px.mu.Unlock()
	_ = ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (px *proxy) pause() {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.gate = make(chan struct{})
}

func (px *proxy) resume() {
	px.mu.Lock()
	defer px.mu.Unlock()
	select {
	case <-px.gate:
	default:
		close(px.gate)
	}
}

// ofKey returns the deliveries of the events of key, in order.
func ofKey(t *testing.T, ds []amqp.Delivery, key string) []amqp.Delivery {
	t.Helper()
	var out []amqp.Delivery
	for _, d := range ds {
		m, err := heraldrabbit.Parse(d)
		require.NoError(t, err)
		if m.Key == key {
			out = append(out, d)
		}
	}
	return out
}
