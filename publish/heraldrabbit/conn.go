package heraldrabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
)

// closeTimeout bounds closing the connection in Close.
const closeTimeout = 5 * time.Second

// channel is a channel in confirm mode with what Publish needs of it.
type channel struct {
	ch       *amqp.Channel
	conn     *amqp.Connection
	returns  chan amqp.Return
	closes   chan *amqp.Error
	frameMax int

	mu     sync.Mutex
	closed *amqp.Error // why the broker or the client closed the channel
}

// reason returns why the channel closed, or nil while it is open or when it
// closed without one (Close).
func (c *channel) reason() *amqp.Error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed != nil || !c.ch.IsClosed() {
		return c.closed
	}
	// The client marks a channel closed before it hands over the reason,
	// and closes c.closes right after: a send that failed on the closed
	// channel can get here first. Recovery enabled on a connection from
	// the DialFunc keeps c.closes open: the wait is bounded.
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case e, ok := <-c.closes:
		if ok && e != nil {
			c.closed = e
		}
	case <-timer.C:
	}
	return c.closed
}

// closedBy reports whether the channel closed with the given reply code.
func (c *channel) closedBy(code int) bool {
	e := c.reason()
	return e != nil && e.Code == code
}

// connector keeps one connection and a pool of idle channels on it,
// dialling again after the connection is lost.
type connector struct {
	dial     DialFunc
	minDelay time.Duration
	maxDelay time.Duration
	log      *slog.Logger

	// ctx ends when the connector closes; it bounds dials in progress.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the goroutines that outlive a Publish: dials, connection
	// watchers, senders and channels being discarded.
	wg sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	conn    *amqp.Connection
	idle    []*channel
	dialing chan struct{} // closed when the dial in progress ends
	dialErr error         // why the last dial failed
	retryAt time.Time     // no dial before then
	delay   time.Duration // the backoff after the next failed dial
	down    bool          // a dial failed since the last connection
}

func newConnector(dial DialFunc, minDelay, maxDelay time.Duration, log *slog.Logger) *connector {
	ctx, cancel := context.WithCancel(context.Background())
	return &connector{dial: dial, minDelay: minDelay, maxDelay: maxDelay, delay: minDelay,
		log: log, ctx: ctx, cancel: cancel}
}

// enter registers a call in progress (Publish, Connect), which Close waits
// for, and reports false once the connector is closed.
func (cn *connector) enter() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.closed {
		return false
	}
	cn.wg.Add(1)
	return true
}

func (cn *connector) exit() { cn.wg.Done() }

// acquire returns a channel of the live connection: an idle one, or a new
// one, dialling first if there is no connection. While dials fail it
// returns an error at once until the backoff has passed.
func (cn *connector) acquire(ctx context.Context) (*channel, error) {
	for {
		cn.mu.Lock()
		if cn.closed {
			cn.mu.Unlock()
			return nil, ErrClosed
		}
		for len(cn.idle) > 0 {
			c := cn.idle[len(cn.idle)-1]
			cn.idle = cn.idle[:len(cn.idle)-1]
			if !c.ch.IsClosed() {
				cn.mu.Unlock()
				return c, nil
			}
		}
		if cn.conn != nil && !cn.conn.IsClosed() {
			conn := cn.conn
			cn.mu.Unlock()
			return cn.open(ctx, conn)
		}
		cn.conn = nil
		if cn.dialing == nil {
			if wait := time.Until(cn.retryAt); wait > 0 {
				err := cn.dialErr
				cn.mu.Unlock()
				return nil, fmt.Errorf("heraldrabbit: not connected (next attempt in %s): %w",
					wait.Round(time.Millisecond), err)
			}
			cn.dialing = make(chan struct{})
			cn.wg.Add(1)
			go cn.connect(cn.dialing)
		}
		dialing := cn.dialing
		cn.mu.Unlock()
		select {
		case <-dialing:
		case <-ctx.Done():
			return nil, fmt.Errorf("heraldrabbit: connecting: %w", context.Cause(ctx))
		}
	}
}

// connect dials once and records the result, then closes done. It runs in
// its own goroutine so that a Publish whose ctx ends does not abandon a
// dial half way: the next Publish uses its connection.
func (cn *connector) connect(done chan struct{}) {
	defer cn.wg.Done()
	conn, err := cn.dial(cn.ctx)
	cn.mu.Lock()
	defer cn.mu.Unlock()
	defer close(done)
	cn.dialing = nil
	if err == nil && cn.closed {
		_ = conn.Close()
		err = ErrClosed
	}
	if err != nil {
		cn.dialErr = &scrubbedError{prefix: "heraldrabbit: connecting", err: err}
		// Full jitter on the upper half: relays restarted together do not
		// dial in step.
		wait := cn.delay/2 + rand.N(cn.delay/2+1)
		cn.retryAt = time.Now().Add(wait)
		cn.delay = min(cn.delay*2, cn.maxDelay)
		if !cn.down {
			cn.log.Warn("connecting to RabbitMQ failed; retrying", "error", cn.dialErr.Error(), "retry_in", wait)
		} else {
			cn.log.Debug("connecting to RabbitMQ failed", "error", cn.dialErr.Error(), "retry_in", wait)
		}
		cn.down = true
		return
	}
	cn.conn, cn.dialErr, cn.delay, cn.down = conn, nil, cn.minDelay, false
	cn.retryAt = time.Time{}
	// The address and vhost name the broker in logs: the DialFunc's URL,
	// if it had one, may hold a password.
	where, vhost := conn.RemoteAddr().String(), conn.Config.Vhost
	cn.log.Info("connected to RabbitMQ", "broker", where, "vhost", vhost)
	closes := conn.NotifyClose(make(chan *amqp.Error, 1))
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		// The client closes closes once the connection is gone.
		for e := range closes {
			cn.log.Warn("connection to RabbitMQ lost", "broker", where, "vhost", vhost, "error", herald.Scrub(e.Error()))
		}
	}()
}

// open opens a channel in confirm mode on conn, within ctx. A channel that
// opens after ctx ended goes to the idle pool.
func (cn *connector) open(ctx context.Context, conn *amqp.Connection) (*channel, error) {
	type result struct {
		c   *channel
		err error
	}
	out := make(chan result)
	gone := make(chan struct{})
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		c, err := openChannel(conn)
		select {
		case out <- result{c, err}:
		case <-gone:
			if err == nil {
				cn.release(c)
			}
		}
	}()
	select {
	case r := <-out:
		if r.err != nil {
			return nil, fmt.Errorf("heraldrabbit: opening a channel: %s", herald.Scrub(r.err.Error()))
		}
		return r.c, nil
	case <-ctx.Done():
		close(gone)
		return nil, fmt.Errorf("heraldrabbit: opening a channel: %w", context.Cause(ctx))
	}
}

func openChannel(conn *amqp.Connection) (*channel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	c := &channel{
		ch:       ch,
		conn:     conn,
		frameMax: conn.Config.FrameSize,
		// Deep enough that the client's reader, which hands over a return
		// before reading on, never waits on it while Publish drains it.
		returns: ch.NotifyReturn(make(chan amqp.Return, 256)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	return c, nil
}

// release returns c to the idle pool, or closes it if the connector closed
// or the connection was replaced.
func (cn *connector) release(c *channel) {
	cn.mu.Lock()
	if !cn.closed && c.conn == cn.conn && !c.ch.IsClosed() {
		cn.idle = append(cn.idle, c)
		cn.mu.Unlock()
		return
	}
	cn.mu.Unlock()
	cn.discard(c, nil)
}

// discard closes c once its sender (if any, signalled by senderDone) has
// stopped, draining its returns meanwhile so that the client's reader never
// waits on them.
func (cn *connector) discard(c *channel, senderDone <-chan struct{}) {
	cn.wg.Add(2)
	go func() {
		defer cn.wg.Done()
		// The client closes returns when the channel closes.
		for range c.returns {
		}
	}()
	go func() {
		defer cn.wg.Done()
		if senderDone != nil {
			<-senderDone
		}
		_ = c.ch.Close()
	}()
}

// close closes the connection, ending every channel, and waits for the
// connector's goroutines.
func (cn *connector) close() {
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return
	}
	cn.closed = true
	conn := cn.conn
	cn.conn, cn.idle = nil, nil
	cn.cancel()
	cn.mu.Unlock()
	if conn != nil {
		if err := conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
			cn.log.Debug("closing the connection", "error", herald.Scrub(err.Error()))
		}
	}
	cn.wg.Wait()
}
