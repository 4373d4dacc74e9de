package heraldmqtt

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/eclipse/paho.golang/paho"

	"github.com/herald-outbox/herald"
)

// link is one connection to the broker, from its CONNACK to its loss,
// with what the broker announced in the CONNACK.
type link struct {
	maxPacket  int // the broker's Maximum Packet Size; 0 when it set none
	maxQoS     byte
	receiveMax int           // PUBLISHes in flight at once
	down       chan struct{} // closed when the connection is lost
}

// links follows the connection manager's connection: the live link, or
// why the last attempt to connect failed.
//
// autopaho hands the live connection to Publish on its own; links tells
// Publish which connection that is, so that a round can stop waiting for
// PUBACKs when it is lost: the client forgets a lost connection's
// publishes without answering them.
type links struct {
	log     *slog.Logger
	servers string // the broker addresses, for logs
	// calls counts Publish and Connect calls in progress, which Close
	// waits for.
	calls sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	cur     *link         // nil while not connected
	lastErr error         // why the last attempt failed; nil once connected
	changed chan struct{} // closed and replaced on every change
	failing bool          // an attempt failed since the last connection: log at Debug
	bye     *paho.Disconnect
}

func newLinks(log *slog.Logger, servers string) *links {
	return &links{log: log, servers: servers, changed: make(chan struct{})}
}

// enter registers a call in progress and reports false once closed.
func (ls *links) enter() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return false
	}
	ls.calls.Add(1)
	return true
}

func (ls *links) exit() { ls.calls.Done() }

// close marks the links closed, waking every waiter, and reports whether
// it was open.
func (ls *links) close() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.closed {
		return false
	}
	ls.closed = true
	ls.broadcast()
	return true
}

// broadcast wakes the waiters of current. The caller holds mu.
func (ls *links) broadcast() {
	close(ls.changed)
	ls.changed = make(chan struct{})
}

// current returns the live link. While there is none, it waits for the
// attempt in progress, and fails at once when the last attempt failed.
func (ls *links) current(ctx context.Context) (*link, error) {
	for {
		ls.mu.Lock()
		l, lastErr, closed, changed := ls.cur, ls.lastErr, ls.closed, ls.changed
		ls.mu.Unlock()
		switch {
		case closed:
			return nil, ErrClosed
		case l != nil:
			return l, nil
		case lastErr != nil:
			return nil, fmt.Errorf("heraldmqtt: not connected: %w", lastErr)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("heraldmqtt: connecting: %w", context.Cause(ctx))
		}
	}
}

// up records a new connection and what its CONNACK announced.
func (ls *links) up(ca *paho.Connack) {
	l := &link{maxQoS: 2, receiveMax: 65535, down: make(chan struct{})}
	if props := ca.Properties; props != nil {
		if props.MaximumPacketSize != nil {
			l.maxPacket = int(*props.MaximumPacketSize)
		}
		if props.MaximumQoS != nil {
			l.maxQoS = *props.MaximumQoS
		}
		if props.ReceiveMaximum != nil && *props.ReceiveMaximum > 0 {
			l.receiveMax = int(*props.ReceiveMaximum)
		}
	}
	ls.mu.Lock()
	if ls.cur != nil {
		close(ls.cur.down)
	}
	ls.cur, ls.lastErr, ls.failing, ls.bye = l, nil, false, nil
	ls.broadcast()
	ls.mu.Unlock()
	ls.log.Info("connected to the MQTT broker", "broker", ls.servers, "max_packet_size", l.maxPacket, "receive_maximum", l.receiveMax)
}

// down records the loss of the connection.
func (ls *links) down() {
	ls.mu.Lock()
	if ls.cur != nil {
		close(ls.cur.down)
		ls.cur = nil
	}
	bye := ls.bye
	ls.broadcast()
	ls.mu.Unlock()
	if bye != nil {
		ls.log.Warn("the MQTT broker closed the connection; reconnecting", "broker", ls.servers,
			"reason_code", fmt.Sprintf("0x%02x", bye.ReasonCode))
		return
	}
	ls.log.Warn("connection to the MQTT broker lost; reconnecting", "broker", ls.servers)
}

// disconnected records the DISCONNECT the broker sent, for the log line
// of the loss that follows.
func (ls *links) disconnected(d *paho.Disconnect) {
	ls.mu.Lock()
	ls.bye = d
	ls.mu.Unlock()
}

// failed records a failed attempt to connect.
func (ls *links) failed(err error) {
	ce := &connectError{err: err}
	ls.mu.Lock()
	first := !ls.failing
	ls.failing = true
	ls.mu.Unlock()
	// Logged before Publish can return the error: a caller that saw it
	// finds it in the log too.
	if first {
		ls.log.Warn("connecting to the MQTT broker failed; retrying", "broker", ls.servers, "error", ce.Error())
	} else {
		ls.log.Debug("connecting to the MQTT broker failed", "broker", ls.servers, "error", ce.Error())
	}
	ls.mu.Lock()
	ls.lastErr = ce
	ls.broadcast()
	ls.mu.Unlock()
}

// connectError is why an attempt to connect failed, scrubbed of any
// password (autopaho quotes the server URL). It unwraps to autopaho's
// error, such as an *autopaho.ConnackError holding the broker's reason
// code.
type connectError struct{ err error }

func (e *connectError) Error() string { return herald.Scrub(e.err.Error()) }
func (e *connectError) Unwrap() error { return e.err }
