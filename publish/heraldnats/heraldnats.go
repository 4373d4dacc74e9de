// Package heraldnats publishes Herald events to NATS JetStream.
//
// Each event becomes one message on the subject named by its topic, with
// Nats-Msg-Id set to the event id: a republished event (the relay delivers
// at least once) that reaches the stream within its duplicate window is
// dropped there, so consumers see it once. Its headers are the producer's
// and Herald's (herald.EventHeaders); a producer header named Nats-* is
// never sent, so a row written with plain SQL cannot steer JetStream
// (Nats-Expected-Stream, Nats-TTL).
//
// # Order within a key
//
// JetStream answers every publish on its own: it can refuse one message
// and store the next one sent behind it, for example when its intake queue
// is full (429, too many requests) or when the message exceeds the
// stream's MaxMsgSize, and a message it stored cannot be taken back. Had
// Publish sent all of a key's events without waiting, a later event could
// then be stored after an earlier one of its key failed. Publish therefore
// sends a batch in rounds (herald.SendInRounds): a round publishes, without
// waiting between them, the next event of every ordered key (and, in the
// first round, every event that is not ordered), then waits for their
// PubAcks. An event is sent only once the earlier event of its key was
// stored; once one failed, the later events of its key are reported with
// herald.ErrHeldBack and not sent. A batch of distinct keys is one round
// trip; n events of one key take n.
//
// # Atomic batches
//
// With Config.AtomicBatches, Publish sends the events of a batch that
// share a subject as one JetStream atomic batch (nats-server 2.12 or
// later; the stream needs allow_atomic, AllowAtomicPublish), which the
// stream stores whole or not at all: a key's events then travel together,
// one round trip for the batch instead of one per event of the key. A batch
// is cut at Config.AtomicBatchSize messages and at MaxPendingBytes bytes,
// and a key's events after a cut wait for the answer to the part before
// it, as they wait for a round. A stream refuses an atomic batch as a
// whole: when it says it is busy, every key of the batch waits
// (herald.Unavailable, then herald.ErrHeldBack); for any other refusal
// (an event over the stream's MaxMsgSize, an event it already holds, a
// stream without allow_atomic), Publish sends that batch's events again in
// rounds, so that only the event at fault fails and the stream drops the
// copies of those it holds by their Nats-Msg-Id. A republished batch
// therefore still reaches consumers once, at the cost of rounds. A subject
// whose stream lacks allow_atomic is sent in rounds for a minute after each
// refusal, with a warning. Stored messages keep the Nats-Batch-Id,
// Nats-Batch-Sequence and, on the last, Nats-Batch-Commit headers.
//
// # Backpressure
//
// The messages awaiting a PubAck are bounded in number (Config.MaxPending)
// and in bytes (Config.MaxPendingBytes), over all batches in flight, so
// that a round of large events does not overflow the stream's intake queue
// (nats-server's max_buffered_size and max_buffered_msgs, shared by every
// publisher of the stream). A refusal that says the server is busy rather
// than that the message is wrong (429 too many requests from a full intake
// queue; 503 JetStream temporarily unavailable or out of resources) is
// reported with herald.Unavailable: the relay retries the event after a
// pause without spending an attempt, and the later events of its key wait
// behind it.
//
// # URL form
//
// Importing the package registers nats://, tls://, ws:// and wss:// with
// heraldspec, which opens a destination from its URL (ParseURLs, then
// URLConfig.Open):
//
//	nats://[USER[:PASSWORD]@]HOST:PORT[,nats://HOST:PORT...][?options]
//
// A list names the servers of one cluster; its options and user
// information are written once, or alike on every URL. One way to
// authenticate: a user and password (nats://USER:PASSWORD@, or
// nats://USER@ with the password from the destination's Password
// secret), a token (nats://TOKEN@, or the Token secret), or one of the
// options:
//
//	creds_file  a credentials file: a user JWT and nkey seed, as nsc
//	            writes it, read again at each connection
//	nkey_file   a file holding an nkey user seed (SU...)
//	ca_file     a PEM CA to trust instead of the system's roots
//	cert_file   a client certificate, with key_file (mutual TLS)
//	key_file    its key
//
// The TLS files go with nats://, tls:// or wss://, not ws://. The
// settings a URL does not carry (SubjectPrefix, CreateStream, MaxPending,
// ...) come from the destination's Config, a *Config. The connection is
// named by the destination's ClientName and retried forever once made;
// its losses and recoveries are logged to its Logger.
package heraldnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// DefaultMaxPendingBytes is Config.MaxPendingBytes's default: 8 MiB.
const DefaultMaxPendingBytes = 8 << 20

// Config configures a Publisher. A nil *Config means the defaults.
type Config struct {
	// SubjectPrefix is joined to every topic with a dot: with "prod", the
	// topic "orders.placed" is published on "prod.orders.placed". Defaults
	// to "" (the topic is the subject).
	SubjectPrefix string
	// MaxPending bounds the messages awaiting a PubAck, over all batches in
	// flight, and with them the memory and broker load of a burst. Publish
	// waits for a free slot. Defaults to 4096.
	MaxPending int
	// MaxPendingBytes bounds the bytes (headers and payload) of the
	// messages awaiting a PubAck, over all batches in flight, as
	// MaxPending bounds their number: a stream's intake queue refuses
	// what exceeds its max_buffered_size (128 MiB by default, for all its
	// publishers together). A message larger than the bound is sent alone.
	// Defaults to DefaultMaxPendingBytes.
	MaxPendingBytes int
	// AckTimeout is how long a message waits for its PubAck before it
	// counts as failed. It frees the slots and bytes of messages whose
	// Publish gave up when its context ended. Defaults to 30s.
	AckTimeout time.Duration
	// CreateStream is a stream New creates, or updates to this config, so
	// that it captures the published subjects before the first publish.
	// Defaults to nil: streams are managed elsewhere and never created.
	CreateStream *jetstream.StreamConfig
	// MaxMessageBytes refuses, before sending, a message whose headers and
	// payload exceed it: the refusal is permanent and holds back the later
	// events of its key in the batch. Set it to the MaxMsgSize of the
	// streams the publisher feeds: it spares the round trip of a message
	// the stream would refuse. Defaults to 0: only the server's
	// max_payload, which the client checks.
	MaxMessageBytes int
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent in structured mode, the
	// only mode of the NATS protocol binding 1.0.2: the message data is the
	// JSON event format, with a Content-Type header of
	// heraldce.StructuredContentType; see package heraldce for the
	// attributes. Nats-Msg-Id stays the event id. Parse reads it back.
	// Mode must be empty or heraldce.Structured. Defaults to nil: off.
	CloudEvents *heraldce.Config
	// AtomicBatches sends the events of a batch that share a subject as
	// JetStream atomic batches (nats-server 2.12 or later, on streams
	// created with AllowAtomicPublish, allow_atomic): the stream stores
	// all of them or none, so a key's events go together in one round
	// trip instead of one per event. A batch the stream refuses as a whole
	// for another reason than load (an event over its MaxMsgSize, an event
	// already stored, a stream without allow_atomic) is sent again in
	// rounds, where only the events at fault fail. A subject whose stream
	// lacks allow_atomic is sent in rounds for a minute, with a warning.
	// See the package documentation. Defaults to false: rounds only.
	AtomicBatches bool
	// AtomicBatchSize caps the messages of one atomic batch. Set it to the
	// server's max_batch_size (jetstream limits) when that is lower than
	// the default. Defaults to DefaultAtomicBatchSize.
	AtomicBatchSize int
	// NoStreamHint says how to make a stream capture subject, in the
	// warning logged when no stream does: a program that creates streams
	// from its own flags names them here. Defaults to naming
	// Config.CreateStream and the nats CLI.
	NoStreamHint func(subject string) string
}

const (
	// stallPoll is how long one attempt waits for a free pending slot; the
	// client's stall wait cannot be cancelled, so Publish re-checks its
	// context between attempts.
	stallPoll = 50 * time.Millisecond
	// streamSetupTimeout bounds CreateStream in New, which has no context.
	streamSetupTimeout = 10 * time.Second
	// noStreamLogMax caps the subjects remembered as having no stream;
	// past it they are forgotten, and each is warned of once more.
	noStreamLogMax = 1024
)

// Publisher is a herald.Publisher over a JetStream connection. It lives as
// long as the connection it was given; it holds nothing to close.
type Publisher struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	prefix     string // SubjectPrefix with its dot
	ackTimeout time.Duration
	maxBytes   int // Config.MaxMessageBytes
	pending    *pendingBytes
	pubOpts    []jetstream.PublishOpt
	ce         *heraldce.Config // nil: CloudEvents off
	log        *slog.Logger
	atomic     bool // Config.AtomicBatches
	atomicSize int  // Config.AtomicBatchSize

	atomicOffMu sync.Mutex
	atomicOffAt map[string]time.Time // subjects whose stream refused atomic batches

	// The missing-stream warning is logged once per subject, at Warn with
	// the fix, and at Debug while the subject stays without a stream:
	// each retry of its events would repeat it otherwise. A message
	// stored on the subject forgets it, so a stream deleted later is
	// warned of again.
	noStreamHint func(subject string) string
	noStreamMu   sync.Mutex
	noStream     map[string]struct{} // subjects warned of, not stored to since
	noStreamN    atomic.Int32        // len(noStream), read without the lock on every PubAck
}

var _ herald.Publisher = (*Publisher)(nil)

// New returns a publisher over nc, a connection the caller owns (and
// closes). When cfg.CreateStream is set, New creates or updates that stream
// and fails if it cannot.
func New(nc *nats.Conn, cfg *Config) (*Publisher, error) {
	if nc == nil {
		return nil, errors.New("heraldnats: New: nats connection is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxPending == 0 {
		c.MaxPending = 4096
	}
	if c.MaxPendingBytes == 0 {
		c.MaxPendingBytes = DefaultMaxPendingBytes
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.AtomicBatchSize == 0 {
		c.AtomicBatchSize = DefaultAtomicBatchSize
	}
	if c.NoStreamHint == nil {
		c.NoStreamHint = defaultNoStreamHint
	}
	switch {
	case c.AtomicBatchSize < 0:
		return nil, errors.New("heraldnats: Config.AtomicBatchSize must not be negative")
	case c.MaxPending < 0:
		return nil, errors.New("heraldnats: Config.MaxPending must not be negative")
	case c.MaxPendingBytes < 0:
		return nil, errors.New("heraldnats: Config.MaxPendingBytes must not be negative")
	case c.AckTimeout < 0:
		return nil, errors.New("heraldnats: Config.AckTimeout must not be negative")
	case c.MaxMessageBytes < 0:
		return nil, errors.New("heraldnats: Config.MaxMessageBytes must not be negative")
	}
	prefix := ""
	if c.SubjectPrefix != "" {
		if reason := checkSubject(c.SubjectPrefix); reason != "" {
			return nil, fmt.Errorf("heraldnats: Config.SubjectPrefix %q %s", c.SubjectPrefix, reason)
		}
		prefix = c.SubjectPrefix + "."
	}

	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate("heraldnats: Config.CloudEvents"); err != nil {
			return nil, err
		}
		if c.CloudEvents.ModeOr(heraldce.Structured) != heraldce.Structured {
			return nil, fmt.Errorf("heraldnats: Config.CloudEvents.Mode %q: the NATS protocol binding (1.0.2) defines structured mode only", c.CloudEvents.Mode)
		}
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	pending := newPendingBytes(c.MaxPendingBytes)
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(c.MaxPending),
		jetstream.WithPublishAsyncTimeout(c.AckTimeout),
		// The client calls one of these for every message it resolves,
		// including those whose Publish stopped waiting.
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) { pending.release(m) }),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, _ error) { pending.release(m) }))
	if err != nil {
		return nil, fmt.Errorf("heraldnats: %w", err)
	}
	if c.CreateStream != nil {
		ctx, cancel := context.WithTimeout(context.Background(), streamSetupTimeout)
		defer cancel()
		if _, err := js.CreateOrUpdateStream(ctx, *c.CreateStream); err != nil {
			return nil, fmt.Errorf("heraldnats: Config.CreateStream: creating or updating stream %q: %w", c.CreateStream.Name, err)
		}
	}
	return &Publisher{
		nc:           nc,
		js:           js,
		prefix:       prefix,
		ackTimeout:   c.AckTimeout,
		maxBytes:     c.MaxMessageBytes,
		pending:      pending,
		pubOpts:      []jetstream.PublishOpt{jetstream.WithStallWait(stallPoll)},
		ce:           c.CloudEvents,
		log:          c.Logger.With("component", "herald.nats"),
		noStreamHint: c.NoStreamHint,
		noStream:     map[string]struct{}{},
		atomic:       c.AtomicBatches,
		atomicSize:   c.AtomicBatchSize,
		atomicOffAt:  map[string]time.Time{},
	}, nil
}

// Publish sends the batch in rounds (see the package documentation): each
// round's messages without waiting, then their PubAcks. It returns nil only
// when every PubAck arrived, a *herald.BatchError when some envelopes
// failed, and a plain error when the connection is down or was lost, so
// that the relay retries the batch without spending attempts (events
// already stored are then dropped as duplicates).
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	// Listen before checking the status: a close in between would otherwise
	// leave the wait for PubAcks blocked until ctx ends, since the client
	// never fails pending acks when its connection closes.
	closed := p.nc.StatusChanged(nats.CLOSED)
	defer p.nc.RemoveStatusListener(closed)
	if err := p.checkConnected(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	if p.atomic {
		errs, stats, lost := p.sendAtomic(ctx, batch, closed)
		if lost != nil {
			return p.lostMidBatch(errs, lost)
		}
		if err := herald.BatchResult(errs); err != nil {
			return err
		}
		p.log.Debug("published batch", "batch_size", len(batch), "steps", stats.steps,
			"atomic_batches", stats.batches, "fallbacks", stats.fallbacks)
		return nil
	}

	var (
		lost       error // the connection, not an event, failed
		rounds     int
		duplicates int
	)
	errs := herald.SendInRounds(ctx, batch, 1, func(ctx context.Context, round []int, errs []error) error {
		rounds++
		if rounds > 1 {
			// A connection that went down since the last round would only
			// buffer this one's messages for a reconnect: fail the batch
			// as an outage now.
			if lost = p.checkConnected(); lost != nil {
				return lost
			}
		}
		var dups int
		dups, lost = p.sendRound(ctx, batch, round, errs, closed)
		duplicates += dups
		return lost
	})
	if lost != nil {
		return p.lostMidBatch(errs, lost)
	}
	if err := herald.BatchResult(errs); err != nil {
		return err
	}
	p.log.Debug("published batch", "batch_size", len(batch), "rounds", rounds, "duplicates", duplicates)
	return nil
}

// lostMidBatch is Publish's answer when the connection was lost: an outage
// of the whole batch, unless the broker had confirmed some of its events
// already. Those are reported confirmed, so they are not sent again, and
// every other event as unavailable, to be retried without spending an
// attempt.
func (p *Publisher) lostMidBatch(errs []error, lost error) error {
	confirmed := 0
	for i, err := range errs {
		if err == nil {
			confirmed++
			continue
		}
		errs[i] = herald.Unavailable(err)
	}
	if confirmed == 0 {
		return lost
	}
	p.log.Debug("connection lost mid-batch", "confirmed", confirmed, "batch_size", len(errs))
	return &herald.BatchError{Errs: errs}
}

// sendRound publishes the events batch[i] for i in round without waiting,
// then waits for their PubAcks, setting errs[i] for each. It returns the
// number of PubAcks that reported a duplicate, and an error only when the
// connection was lost.
func (p *Publisher) sendRound(ctx context.Context, batch []herald.Envelope, round []int, errs []error, closed <-chan nats.Status) (duplicates int, lost error) {
	type sent struct {
		i int
		f jetstream.PubAckFuture
	}
	// A round holds at most one event of each ordered key, so no event
	// of the round waits on another's answer.
	inFlight := make([]sent, 0, len(round))
	for _, i := range round {
		if ctx.Err() != nil {
			errs[i] = unconfirmed(ctx)
			continue
		}
		f, err := p.publishAsync(ctx, &batch[i])
		if connectionLost(err) {
			return duplicates, fmt.Errorf("heraldnats: connection lost during publish: %w", err)
		}
		if err != nil {
			errs[i] = err
			continue
		}
		inFlight = append(inFlight, sent{i, f})
	}

	for _, s := range inFlight {
		var err error
		select {
		case ack := <-s.f.Ok():
			if ack.Duplicate {
				duplicates++
			}
		case err = <-s.f.Err():
		case <-closed:
			return duplicates, fmt.Errorf("heraldnats: connection lost awaiting PubAcks: %w", nats.ErrConnectionClosed)
		case <-ctx.Done():
			// Keep the PubAcks that already arrived: each spares the relay
			// a republish.
			select {
			case <-s.f.Ok():
			case err = <-s.f.Err():
			default:
				errs[s.i] = unconfirmed(ctx)
				continue
			}
		}
		if connectionLost(err) {
			return duplicates, fmt.Errorf("heraldnats: connection lost awaiting PubAcks: %w", err)
		}
		if err != nil {
			errs[s.i] = p.classify(s.f.Msg().Subject, err)
		} else {
			errs[s.i] = nil
			p.streamFound(s.f.Msg().Subject)
		}
	}
	return duplicates, nil
}

func (p *Publisher) publishAsync(ctx context.Context, env *herald.Envelope) (jetstream.PubAckFuture, error) {
	subj := p.prefix + env.Topic
	if reason := checkSubject(subj); reason != "" {
		return nil, herald.Permanent(fmt.Errorf("heraldnats: subject %q %s", subj, reason))
	}
	msg := p.message(subj, env)
	size := messageSize(msg)
	if p.maxBytes > 0 && size > p.maxBytes {
		return nil, herald.Permanent(fmt.Errorf("heraldnats: message to %q of %d bytes exceeds MaxMessageBytes (%d)", subj, size, p.maxBytes))
	}
	if err := p.pending.acquire(ctx, msg, size); err != nil {
		return nil, unconfirmed(ctx)
	}
	for {
		f, err := p.js.PublishMsgAsync(msg, p.pubOpts...)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			if err != nil {
				// Never sent: the client resolves no future for it.
				p.pending.release(msg)
				return nil, p.classify(subj, err)
			}
			return f, nil
		}
		if ctx.Err() != nil {
			p.pending.release(msg)
			return nil, unconfirmed(ctx)
		}
	}
}

// messageSize is the size JetStream weighs against a stream's MaxMsgSize:
// the encoded header block and the payload.
func messageSize(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(": ") + len(v) + len("\r\n")
			}
		}
	}
	return n
}

func (p *Publisher) message(subj string, env *herald.Envelope) *nats.Msg {
	h := make(nats.Header, len(env.Headers)+10)
	// Set as given, not canonicalized: a consumer reads back the names the
	// producer wrote (traceparent, not Traceparent). Each value is a slice
	// of one array, one allocation for the message's headers instead of
	// one each.
	vals := make([]string, 0, len(env.Headers)+10)
	set := func(name, v string) {
		vals = append(vals, v)
		h[name] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	data := env.Payload
	if p.ce == nil {
		herald.EventHeaders(env, set)
	} else {
		heraldce.ProducerHeaders(env, set)
		set("Content-Type", heraldce.StructuredContentType)
		data = p.ce.Structured(env)
	}
	set(jetstream.MsgIDHeader, env.ID)
	return &nats.Msg{Subject: subj, Header: h, Data: data}
}

// classify wraps a publish or PubAck error for one envelope.
func (p *Publisher) classify(subj string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		// Not permanent: the stream may be created, or its subjects
		// widened, after the events were written.
		p.warnNoStream(subj)
		return fmt.Errorf("heraldnats: no JetStream stream captures subject %q: %w", subj, err)
	case errors.Is(err, nats.ErrMaxPayload),
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return herald.Permanent(fmt.Errorf("heraldnats: publishing to %q: %w", subj, err))
	case errors.As(err, &apiErr) && busy(apiErr):
		return herald.Unavailable(fmt.Errorf("heraldnats: JetStream is busy, publishing to %q: %w", subj, err))
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return fmt.Errorf("heraldnats: no PubAck for %q within %s: %w (%w)", subj, p.ackTimeout, context.DeadlineExceeded, err)
	}
	return fmt.Errorf("heraldnats: publishing to %q: %w", subj, err)
}

// JetStream error codes (nats-server's errors.json) that say the server is
// busy, not that the message is wrong.
const (
	// errCodeClusterNotAvailable: "JetStream system temporarily
	// unavailable" (503).
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008
	// errCodeInsufficientResources: the server is over its JetStream
	// memory or storage limit (503).
	errCodeInsufficientResources jetstream.ErrorCode = 10023
)

// busy reports whether a PubAck error is the server's backpressure: every
// 429 (a stream's intake queue is full: "too many requests", 10167), and
// the 503s above. The same message is accepted once the server has caught
// up.
func busy(e *jetstream.APIError) bool {
	return e.Code == 429 || e.ErrorCode == errCodeClusterNotAvailable || e.ErrorCode == errCodeInsufficientResources
}

// warnNoStream logs that no stream captures subj, with the fix: at Warn
// the first time, at Debug until a message to subj is stored.
func (p *Publisher) warnNoStream(subj string) {
	p.noStreamMu.Lock()
	_, warned := p.noStream[subj]
	if !warned {
		if len(p.noStream) >= noStreamLogMax {
			clear(p.noStream)
		}
		p.noStream[subj] = struct{}{}
		p.noStreamN.Store(int32(len(p.noStream)))
	}
	p.noStreamMu.Unlock()
	if warned {
		p.log.Debug("no JetStream stream captures subject; will retry", "subject", subj)
		return
	}
	p.log.Warn("no JetStream stream captures subject; its events are retried until one does",
		"subject", subj, "fix", p.noStreamHint(subj))
}

// streamFound forgets that subj had no stream, once a message to it was
// stored.
func (p *Publisher) streamFound(subj string) {
	if p.noStreamN.Load() == 0 {
		return
	}
	p.noStreamMu.Lock()
	_, warned := p.noStream[subj]
	if warned {
		delete(p.noStream, subj)
		p.noStreamN.Store(int32(len(p.noStream)))
	}
	p.noStreamMu.Unlock()
	if warned {
		p.log.Info("a JetStream stream captures subject now", "subject", subj)
	}
}

// defaultNoStreamHint is Config.NoStreamHint's default.
func defaultNoStreamHint(subject string) string {
	return fmt.Sprintf("create a stream whose subjects include %s: set heraldnats.Config.CreateStream, or run nats stream add NAME --subjects %s", subject, subject)
}

// checkConnected returns why the connection cannot publish now, or nil.
func (p *Publisher) checkConnected() error {
	var err error
	switch p.nc.Status() {
	case nats.CONNECTED:
		return nil
	case nats.CLOSED:
		err = nats.ErrConnectionClosed
	case nats.RECONNECTING:
		err = nats.ErrConnectionReconnecting
	case nats.DRAINING_SUBS, nats.DRAINING_PUBS:
		// The PubAck subscription is being drained: acks would be lost.
		err = nats.ErrConnectionDraining
	default:
		err = nats.ErrDisconnected
	}
	if last := p.nc.LastError(); last != nil {
		// The last error may quote a server URL, and a URL may hold a password.
		return fmt.Errorf("heraldnats: %w (last error: %s)", err, herald.Scrub(last.Error()))
	}
	return fmt.Errorf("heraldnats: %w", err)
}

// connectionLost reports whether err says the connection, not the message,
// failed: the whole batch is then retried without spending attempts.
func connectionLost(err error) bool {
	if err == nil {
		return false
	}
	for _, target := range [...]error{
		nats.ErrConnectionClosed, nats.ErrConnectionDraining, nats.ErrConnectionReconnecting,
		nats.ErrDisconnected, nats.ErrReconnectBufExceeded, jetstream.ErrJetStreamPublisherClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

func unconfirmed(ctx context.Context) error {
	return fmt.Errorf("heraldnats: PubAck not received: %w", ctx.Err())
}

// checkSubject returns why s cannot be a publish subject, or "".
func checkSubject(s string) string {
	switch {
	case s == "":
		return "is empty"
	case s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, ".."):
		return "has an empty token"
	case strings.ContainsAny(s, "*>"):
		// Wildcards are for subscribers; a stream filter could not tell such
		// a subject from a pattern.
		return "contains a wildcard (* or >)"
	}
	for _, c := range s {
		if c <= ' ' || c == 0x7f {
			return "contains whitespace or a control character"
		}
	}
	return ""
}

// MaxMessageBytes is the largest message the publisher sends: the
// server's max_payload, or Config.MaxMessageBytes when lower. A claim
// check configured by URL offloads the events above it
// (heraldclaim.Limited).
func (p *Publisher) MaxMessageBytes() int {
	limit := int(p.nc.MaxPayload())
	if p.maxBytes > 0 && (limit <= 0 || p.maxBytes < limit) {
		limit = p.maxBytes
	}
	return limit
}
