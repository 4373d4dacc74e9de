// Package heraldrabbit publishes Herald events to RabbitMQ (AMQP 0-9-1).
//
// Every event becomes one persistent message published to the Publisher's
// exchange, with the event's topic as its routing key (or whatever
// Config.RoutingKey returns). The message carries the event id as its
// message-id property, the event type as its type property, the payload
// byte for byte as its body, and the event's fields and the producer's
// headers as string headers, as herald.EventHeaders maps them (a reserved
// name in a row written with plain SQL, such as CC, is dropped and
// logged). A consumer turns a delivery back into the event with Parse.
//
// With Config.CloudEvents set, every event is a CloudEvent instead, as the
// CloudEvents AMQP binding (1.0) says: in binary mode (the default) the
// attributes are string headers named "cloudEvents:" and the attribute
// ("cloudEvents:id" is the event id), datacontenttype is the content-type
// property, and the body is the payload; in structured mode the body is the
// event in the JSON event format and the content-type property
// heraldce.StructuredContentType. The binding maps AMQP 1.0 application
// properties, which RabbitMQ hands to AMQP 1.0 consumers from the headers
// of AMQP 0-9-1. The producer's other headers stay headers; Herald-* are
// not sent, as the attributes carry the event's fields (see package
// heraldce). Parse reads both modes back.
//
// # What counts as published
//
// The channel is in confirm mode and every message is published
// mandatory. Publish reports an event as published only once the broker
// acknowledged it (basic.ack) and did not return it (basic.return):
//
//   - A returned message had no queue to go to: the exchange has no
//     binding for its routing key (or, on the default exchange, no queue
//     of that name exists). It is reported as a failure of that event. By
//     default the failure is retried like any other, spending the event's
//     attempts until the retry policy sends it to the dead letters: a
//     missing binding is often a deployment race (the consumer that
//     declares the queue starts later) rather than a permanent mistake.
//     Config.UnroutablePermanent sends it to the dead letters at once.
//   - A nacked message is marked herald.Unavailable: the relay retries it
//     after a pause without spending an attempt, and the later events of
//     its key wait behind it. RabbitMQ nacks what it cannot take at the
//     moment, not a message at fault: a queue with x-overflow=reject-publish
//     that is full, a quorum queue electing a leader after losing its
//     node. When the broker nacked every event of a batch it confirmed
//     none of, Publish returns a plain error, which the relay takes as an
//     outage. The publisher logs a warning when the broker starts nacking,
//     and a line when it takes messages again, at most once per 30 seconds
//     (at Debug in between).
//   - A message whose channel or connection closed before the broker
//     answered is marked herald.Unavailable: the relay retries it without
//     spending an attempt. When nothing in the batch got an answer, Publish
//     returns a plain error, which the relay takes as an outage.
//
// RabbitMQ has no broker-side deduplication: an event the relay republishes
// (after a lost confirm or a crash) is delivered again, so consumers
// deduplicate on the event id, as Herald's inbox does.
//
// # Order per key
//
// RabbitMQ keeps the order of the messages of one channel, but reports a
// returned or nacked message only after the later messages of the channel
// were sent. So that no ordered event (herald.Envelope.Ordered) is ever
// delivered after an earlier event of its key failed, Publish sends a batch
// in rounds with herald.SendInRounds: each round sends, on one channel and
// without waiting, the next event of every ordered key (and, in the first
// round, every event that is not ordered), then waits for the broker's
// confirms. A key whose event failed is closed: its later events are
// reported with herald.ErrHeldBack without being sent. A batch of many keys
// takes one round; a batch holding n ordered events of one key takes n
// round trips. Events that are not ordered all go in the first round and
// are never held back.
//
// # Connection
//
// The Publisher owns its connection, made by the DialFunc given to New
// (Dialer makes one from an AMQP URI; ClusterDialer from the URIs of a
// cluster's nodes, trying them in turn), and a pool of channels on it, one
// per Publish in progress. The DialFunc is the user's: it owns TLS,
// authentication and tuning. When the connection closes (a broker restart,
// a network failure, an operator closing it), Publish fails with an
// ordinary error and the next Publish dials again; after a failed dial,
// further dials wait an exponential backoff, and Publish fails at once in
// the meantime.
//
// # URL form
//
// Importing the package registers amqp:// and amqps:// with heraldspec,
// which opens a destination from its URL (ParseURLs, URLConfig.Open):
//
//	amqp[s]://[user[:password]@]host[:port][/vhost][,amqp[s]://host[:port]...][?options]
//
// A list names the nodes of one cluster, dialled in turn (ClusterDialer);
// its user information, vhost and options are written once, or alike on
// every URL.
// Herald's options: exchange (Config.Exchange) and, for amqps:// only,
// the TLS files ca_file (the CAs to trust instead of the system's roots),
// cert_file and key_file (a client certificate and its key). The client's
// options, passed on: heartbeat, connection_timeout, channel_max.
// RabbitMQ's spellings of the TLS options (cacertfile, certfile, keyfile)
// are refused with Herald's. The password may come from the destination's
// Password secret instead of the URL, not from both; the user is then the
// URL's, or guest. The connection is named by the destination's
// ClientName. Open tells a broker that refused the credentials
// (ACCESS_REFUSED) or the TLS handshake from one it could not reach
// (heraldspec.OpenError.Unreachable).
package heraldrabbit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// DefaultMaxMessageBytes is the default Config.MaxMessageBytes: 16 MiB,
// RabbitMQ's default max_message_size since 4.0 (earlier releases allow
// 128 MiB).
const DefaultMaxMessageBytes = 16 << 20

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("heraldrabbit: publisher closed")

// DialFunc makes a connection to the broker. The Publisher calls it for its
// first connection and again whenever the connection is lost, and closes
// the connections it got. ctx ends when the Publisher closes. Its errors
// should not carry a password: the Publisher logs them (after
// herald.Scrub) and returns them from Publish and Connect.
type DialFunc func(ctx context.Context) (*amqp.Connection, error)

// Config configures a Publisher.
type Config struct {
	// Exchange is the exchange every event is published to. Defaults to ""
	// (the default exchange, which routes a message to the queue named by
	// its routing key).
	Exchange string
	// RoutingKey returns the routing key of an event, at most 255 bytes; a
	// longer one fails the event permanently. Defaults to the event's topic.
	RoutingKey func(env *herald.Envelope) string
	// ContentType is the content-type property of every message. Defaults
	// to "" (not set).
	ContentType string
	// MaxMessageBytes is the largest payload Publish sends; a larger one is
	// reported with herald.Permanent without being sent. RabbitMQ answers a
	// body over its max_message_size by closing the channel, which fails
	// the rest of the batch: set this to the server's limit. Defaults to
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// UnroutablePermanent reports a message the broker returned as
	// unroutable with herald.Permanent, sending the event to the dead
	// letters at once. Defaults to false (retried per the retry policy).
	UnroutablePermanent bool
	// ReconnectMinDelay and ReconnectMaxDelay bound the backoff between
	// failed dials, which doubles from the first to the second. They
	// default to 100ms and 10s.
	ReconnectMinDelay, ReconnectMaxDelay time.Duration
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent (AMQP protocol binding
	// 1.0; see the package documentation), in binary mode (cloudEvents:*
	// headers) or structured mode (the JSON event format as the body). In
	// binary mode the content-type property is the event's Content-Type
	// header, or ContentType for an event without one. Defaults to nil:
	// off.
	CloudEvents *heraldce.Config
}

// Publisher is a herald.Publisher over an AMQP connection it owns. It is
// safe for concurrent use; Close it when done.
type Publisher struct {
	exchange    string
	routingKey  func(env *herald.Envelope) string
	contentType string
	maxBytes    int
	unroutable  bool
	ce          *heraldce.Config // nil: CloudEvents off
	conns       *connector
	log         *slog.Logger

	nackMu       sync.Mutex
	nacking      bool      // the broker nacked since the last batch that went through whole
	nackWarned   bool      // and that was logged at Warn
	nackWarnedAt time.Time // when the last warning was logged
}

var _ herald.Publisher = (*Publisher)(nil)

// New returns a publisher that connects with dial, configured by cfg (nil
// for the defaults). It does not connect: the first Publish does (call
// Connect to find out at once whether the broker is reachable). Errors
// name the Config field at fault.
//
// The Publisher owns the connections dial returns: it closes them, and
// dials again when one is lost, so leave the client's own recovery
// (amqp.Config.Recovery) off.
func New(dial DialFunc, cfg *Config) (*Publisher, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.ReconnectMinDelay == 0 {
		c.ReconnectMinDelay = 100 * time.Millisecond
	}
	if c.ReconnectMaxDelay == 0 {
		c.ReconnectMaxDelay = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.RoutingKey == nil {
		c.RoutingKey = func(env *herald.Envelope) string { return env.Topic }
	}
	switch {
	case dial == nil:
		return nil, errors.New("heraldrabbit: a DialFunc is required (Dialer makes one from a URL)")
	case len(c.Exchange) > maxShortString:
		return nil, fmt.Errorf("heraldrabbit: Config.Exchange is longer than %d bytes", maxShortString)
	case len(c.ContentType) > maxShortString:
		return nil, fmt.Errorf("heraldrabbit: Config.ContentType is longer than %d bytes", maxShortString)
	case c.MaxMessageBytes < 0:
		return nil, errors.New("heraldrabbit: Config.MaxMessageBytes must not be negative")
	case c.ReconnectMinDelay < 0:
		return nil, errors.New("heraldrabbit: Config.ReconnectMinDelay must not be negative")
	case c.ReconnectMaxDelay < c.ReconnectMinDelay:
		return nil, errors.New("heraldrabbit: Config.ReconnectMaxDelay must not be less than Config.ReconnectMinDelay")
	}
	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate("heraldrabbit: Config.CloudEvents"); err != nil {
			return nil, err
		}
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	log := c.Logger.With("component", "herald.rabbit")
	return &Publisher{
		exchange:    c.Exchange,
		routingKey:  c.RoutingKey,
		contentType: c.ContentType,
		maxBytes:    c.MaxMessageBytes,
		unroutable:  c.UnroutablePermanent,
		ce:          c.CloudEvents,
		conns:       newConnector(dial, c.ReconnectMinDelay, c.ReconnectMaxDelay, log),
		log:         log,
	}, nil
}

// Connect connects to the broker now, if the publisher is not connected,
// and reports whether it could, within ctx.
func (p *Publisher) Connect(ctx context.Context) error {
	if !p.conns.enter() {
		return ErrClosed
	}
	defer p.conns.exit()
	c, err := p.conns.acquire(ctx)
	if err != nil {
		return err
	}
	p.conns.release(c)
	return nil
}

// Close closes the connection and waits for the publisher's goroutines to
// end. A Publish in progress fails. Closing twice does nothing.
func (p *Publisher) Close() error {
	p.conns.close()
	return nil
}

// maxShortString is AMQP's limit on a short string: exchange and routing
// key, header names, message-id, type and content-type.
const maxShortString = 255

// Publish sends the batch in rounds (see the package documentation) and
// waits for the broker's confirms. It returns nil only when the broker
// acknowledged every event without returning it; a *herald.BatchError when
// some events failed; and a plain error when no event got an answer
// because the broker is unreachable, the connection or channel closed, or
// ctx ended first.
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("heraldrabbit: not published: %w", context.Cause(ctx))
	}
	if !p.conns.enter() {
		return ErrClosed
	}
	defer p.conns.exit()
	c, err := p.conns.acquire(ctx)
	if err != nil {
		return err
	}

	s := &sending{p: p, c: c, batch: batch}
	errs := herald.SendInRounds(ctx, batch, 1, s.round)
	if s.stopped == nil {
		p.conns.release(c)
	}
	result := herald.BatchResult(errs)
	p.noteNacks(s.nacked, len(batch), result == nil)
	switch {
	case result == nil:
		p.log.Debug("published batch", "batch_size", len(batch), "rounds", s.rounds)
		return nil
	case s.answered == 0:
		// Nothing reached the broker and came back but nacks: the broker
		// or the channel is at fault, not the events, and the relay takes
		// a plain error as an outage.
		cause := s.stopped
		if cause == nil {
			cause = firstError(errs)
		}
		return fmt.Errorf("heraldrabbit: no event of %d confirmed: %w", len(batch), cause)
	}
	return result
}

// nackWarnEvery is the least time between two warnings that the broker
// nacks: a broker that nacks on and off (a quorum queue electing its
// leader) would otherwise log a pair of lines per batch.
const nackWarnEvery = 30 * time.Second

// noteNacks logs when the broker starts nacking (a warning, with the
// batch's count) and when a batch went through whole after that: at Warn
// and Info at most once per nackWarnEvery, at Debug in between.
func (p *Publisher) noteNacks(nacked, size int, whole bool) {
	p.nackMu.Lock()
	defer p.nackMu.Unlock()
	switch {
	case nacked > 0 && !p.nacking:
		p.nacking = true
		now := time.Now()
		p.nackWarned = p.nackWarnedAt.IsZero() || now.Sub(p.nackWarnedAt) >= nackWarnEvery
		level := slog.LevelDebug
		if p.nackWarned {
			level, p.nackWarnedAt = slog.LevelWarn, now
		}
		p.log.Log(context.Background(), level, "RabbitMQ refused messages (basic.nack: a queue is full, or has no leader); they are retried without spending attempts",
			"nacked", nacked, "batch_size", size)
	case whole && p.nacking:
		p.nacking = false
		level := slog.LevelDebug
		if p.nackWarned {
			level = slog.LevelInfo
		}
		p.log.Log(context.Background(), level, "RabbitMQ takes messages again")
	}
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// sending is one Publish call's state across its rounds.
type sending struct {
	p     *Publisher
	c     *channel
	batch []herald.Envelope
	// answered counts the events the broker answered for (an ack, a
	// return), and those refused before sending: with none, the batch
	// failed as a whole.
	answered int
	// nacked counts the events the broker nacked.
	nacked int
	rounds int
	// stopped is why c can take no further round: the channel failed, or
	// ctx ended while it waited for the broker. c was discarded.
	stopped error
}

// round is the herald.RoundFunc of a Publish: it builds the round's
// messages, sends them on one channel and waits for their confirms.
func (s *sending) round(ctx context.Context, idx []int, errs []error) error {
	send := make([]int, 0, len(idx))
	msgs := make([]amqp.Publishing, 0, len(idx))
	keys := make([]string, 0, len(idx))
	for _, i := range idx {
		msg, rk, err := s.p.message(&s.batch[i], s.c.frameMax)
		if err != nil {
			errs[i] = err
			s.answered++
			continue
		}
		send, msgs, keys = append(send, i), append(msgs, msg), append(keys, rk)
	}
	if len(send) == 0 {
		return nil
	}
	s.rounds++
	n, nacked, stopped := s.p.round(ctx, s.c, s.batch, send, msgs, keys, errs)
	s.answered += n
	s.nacked += nacked
	if stopped == nil {
		return nil
	}
	s.stopped = stopped
	if ctx.Err() != nil {
		// The caller gave up: not the broker's fault.
		return fmt.Errorf("heraldrabbit: not confirmed: %w", stopped)
	}
	// The events it did not answer for are retried without spending an
	// attempt: the channel, not the event, failed.
	return herald.Unavailable(fmt.Errorf("heraldrabbit: not confirmed: %w", stopped))
}

// message builds the AMQP message of env and its routing key, or the
// permanent error that keeps it from being sent. frameMax is the
// connection's negotiated frame size (0 for no limit): the properties,
// headers included, travel in a single frame.
func (p *Publisher) message(env *herald.Envelope, frameMax int) (amqp.Publishing, string, error) {
	fail := func(format string, args ...any) (amqp.Publishing, string, error) {
		return amqp.Publishing{}, "", herald.Permanent(fmt.Errorf("heraldrabbit: event %s: "+format, append([]any{env.ID}, args...)...))
	}
	rk := p.routingKey(env)
	if len(rk) > maxShortString {
		return fail("routing key is longer than %d bytes", maxShortString)
	}
	msg := amqp.Publishing{
		ContentType:  p.contentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    env.ID,
		Timestamp:    env.CreatedAt,
		Body:         env.Payload,
	}
	var err error
	if p.ce != nil {
		err = p.cloudEvent(env, &msg)
	} else {
		msg.Headers, err = p.headers(env)
	}
	if err != nil {
		return fail("%v", err)
	}
	if len(msg.Body) > p.maxBytes {
		what := "payload"
		if p.ce != nil {
			what = "message body"
		}
		return fail("%s of %d bytes is over the limit of %d (Config.MaxMessageBytes)", what, len(msg.Body), p.maxBytes)
	}
	// The type property is a short string; the Herald-Type header always
	// carries the whole type.
	if len(env.Type) <= maxShortString {
		msg.Type = env.Type
	}
	if msg.Body == nil {
		msg.Body = []byte{}
	}
	if size := propertiesSize(&msg); frameMax > 0 && size > frameMax {
		return fail("headers take %d bytes, over the connection's frame size of %d", size, frameMax)
	}
	return msg, rk, nil
}

// headers returns the message headers of env, as herald.EventHeaders maps
// them. A reserved name in a row inserted with plain SQL (which a Writer
// would have refused) is dropped and logged: CC and BCC would make
// RabbitMQ route a copy to other queues.
func (p *Publisher) headers(env *herald.Envelope) (amqp.Table, error) {
	for name := range env.Headers {
		if herald.ValidateHeaderName(name) != nil {
			p.log.Warn("dropped a reserved header", "event_id", env.ID, "header", name)
		}
	}
	h := make(amqp.Table, len(env.Headers)+8)
	var err error
	herald.EventHeaders(env, func(name, value string) {
		if len(name) > maxShortString && err == nil {
			err = fmt.Errorf("header name is longer than %d bytes", maxShortString)
		}
		h[name] = value
	})
	return h, err
}

// cloudEvent sets the headers, content type and body of msg to carry env as
// a CloudEvent.
func (p *Publisher) cloudEvent(env *herald.Envelope, msg *amqp.Publishing) error {
	for name := range env.Headers {
		if herald.ValidateHeaderName(name) != nil {
			p.log.Warn("dropped a reserved header", "event_id", env.ID, "header", name)
		}
	}
	h := make(amqp.Table, len(env.Headers)+12)
	var err error
	set := func(name, value string) {
		if len(name) > maxShortString && err == nil {
			err = fmt.Errorf("header name is longer than %d bytes", maxShortString)
		}
		h[name] = value
	}
	heraldce.ProducerHeaders(env, set)
	msg.Headers = h
	if p.ce.ModeOr(heraldce.Binary) == heraldce.Structured {
		msg.ContentType, msg.Body = heraldce.StructuredContentType, p.ce.Structured(env)
	} else if ct := p.ce.Binary(env, heraldce.PrefixAMQP, set); ct != "" {
		msg.ContentType = ct
	}
	if len(msg.ContentType) > maxShortString && err == nil {
		err = fmt.Errorf("content type is longer than %d bytes", maxShortString)
	}
	return err
}

// propertiesSize bounds from above the size of the content header frame
// that carries msg's properties, frame overhead included.
func propertiesSize(msg *amqp.Publishing) int {
	const (
		frameOverhead = 7 + 1 // type, channel, size; end marker
		headerFixed   = 2 + 2 + 8 + 2
		fixedProps    = 1 + 1 + 8 // delivery mode, priority, timestamp
	)
	n := frameOverhead + headerFixed + fixedProps
	n += 1 + len(msg.ContentType) + 1 + len(msg.MessageId) + 1 + len(msg.Type)
	n += 4 // the table's length
	for name, v := range msg.Headers {
		s, _ := v.(string)
		n += 1 + len(name) + 1 + 4 + len(s)
	}
	return n
}

// sent is the outcome of handing one message of a round to the channel.
type sent struct {
	j   int // position in the round
	dc  *amqp.DeferredConfirmation
	err error
}

// round publishes the events of batch at idx (msgs[j] and keys[j] are the
// message and routing key of idx[j]) on c without waiting, then waits for
// their confirms, storing each event's result in errs. It returns how many
// events the broker answered for and, when c can take no further round,
// why; c is then discarded.
func (p *Publisher) round(ctx context.Context, c *channel, batch []herald.Envelope, idx []int,
	msgs []amqp.Publishing, keys []string, errs []error) (answered, nacked int, stopped error) {
	// Sending happens in its own goroutine: a write blocks while the
	// broker does not read (a resource alarm blocks publishing
	// connections), and Publish must still return when ctx ends.
	results := make(chan sent, len(idx))
	senderDone := make(chan struct{})
	p.conns.wg.Add(1)
	go func() {
		defer p.conns.wg.Done()
		defer close(senderDone)
		defer close(results)
		for j := range idx {
			dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, keys[j], true, false, msgs[j])
			results <- sent{j, dc, err}
			if err != nil {
				return
			}
		}
	}()

	var (
		queue    []sent // sent, confirm awaited, in publish order
		returned = map[string]amqp.Return{}
		returns  = c.returns
		sending  = results
		broken   error
	)
	// Returns arrive before the confirm of the same message (the broker
	// sends basic.return first and the client hands it to c.returns
	// before it reads the ack): drain them before taking a confirm as
	// success.
	drain := func() {
		for {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				returned[r.MessageId] = r
			default:
				return
			}
		}
	}
	for sending != nil || len(queue) > 0 {
		var head <-chan struct{}
		if len(queue) > 0 {
			head = queue[0].dc.Done()
		}
		select {
		case s, ok := <-sending:
			switch {
			case !ok:
				sending = nil
			case s.err != nil:
				if ctx.Err() == nil {
					broken = p.channelError(c, s.err)
				}
			case s.dc == nil:
				broken = errors.New("channel not in confirm mode")
			default:
				queue = append(queue, s)
			}
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			returned[r.MessageId] = r
		case <-head:
			drain()
			s := queue[0]
			queue = queue[1:]
			i := idx[s.j]
			verdict, err := p.outcome(c, &batch[i], keys[s.j], s.dc, returned)
			errs[i] = err
			switch {
			case verdict == answerGiven:
				answered++
			case verdict == answerNack:
				nacked++
			case broken == nil:
				broken = p.channelError(c, nil)
			}
		case <-ctx.Done():
			broken = context.Cause(ctx)
			// Confirms and returns may still come for what was sent: the
			// channel is of no further use.
			sending, queue = nil, nil
		}
	}
	if broken == nil {
		for _, i := range idx {
			if errors.Is(errs[i], herald.ErrNoAnswer) {
				// The sender stopped early without the channel failing:
				// ctx ended while it was handing over a message.
				broken = context.Cause(ctx)
				if broken == nil {
					broken = p.channelError(c, nil)
				}
				break
			}
		}
	}
	if broken != nil || c.ch.IsClosed() {
		if broken == nil {
			broken = p.channelError(c, nil)
		}
		p.conns.discard(c, senderDone)
		return answered, nacked, broken
	}
	return answered, nacked, nil
}

// answer is what became of one sent event, for the batch as a whole.
type answer int

const (
	answerNone  answer = iota // the channel closed before the broker answered
	answerGiven               // an ack, a return, or the channel closed over the message
	answerNack                // basic.nack: the broker cannot take it now
)

// outcome is what the broker answered for one sent event whose
// confirmation is done, and the event's result.
func (p *Publisher) outcome(c *channel, env *herald.Envelope, rk string, dc *amqp.DeferredConfirmation,
	returned map[string]amqp.Return) (answer, error) {
	if r, ok := returned[env.ID]; ok {
		err := fmt.Errorf("heraldrabbit: event %s returned unroutable by the broker (exchange %q, routing key %q): %d %s",
			env.ID, p.exchange, rk, r.ReplyCode, r.ReplyText)
		if p.unroutable {
			err = herald.Permanent(err)
		}
		return answerGiven, err
	}
	// The client completes a confirmation with a nack when its channel
	// closes, after marking the channel closed.
	if dc.Acked() {
		return answerGiven, nil
	}
	if c.ch.IsClosed() {
		cause := p.channelError(c, nil)
		err := fmt.Errorf("heraldrabbit: event %s not confirmed: %w", env.ID, cause)
		if c.closedBy(amqp.PreconditionFailed) {
			// The broker closed the channel over a message (one over its
			// max_message_size): retrying as an outage would never end,
			// so the event spends its attempts.
			return answerGiven, err
		}
		return answerNone, herald.Unavailable(err)
	}
	// The broker could not take the message now (see the package
	// documentation): not the event's fault.
	return answerNack, herald.Unavailable(fmt.Errorf("heraldrabbit: event %s refused by the broker (basic.nack: a queue is full, or has no leader)", env.ID))
}

// channelError describes why c failed.
func (p *Publisher) channelError(c *channel, err error) error {
	if reason := c.reason(); reason != nil {
		return fmt.Errorf("heraldrabbit: channel closed: %s", herald.Scrub(reason.Error()))
	}
	if err != nil {
		return fmt.Errorf("heraldrabbit: publishing: %s", herald.Scrub(err.Error()))
	}
	return errors.New("heraldrabbit: channel closed")
}

// MaxMessageBytes is Config.MaxMessageBytes, the largest message the
// publisher sends. A claim check configured by URL offloads the events
// above it (heraldclaim.Limited).
func (p *Publisher) MaxMessageBytes() int { return p.maxBytes }
