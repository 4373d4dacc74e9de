// Package heraldmqtt publishes Herald events to an MQTT 5 broker, with
// the Eclipse Paho client (autopaho).
//
// Every event becomes one PUBLISH at QoS 1, not retained, to the MQTT
// topic name its event topic maps to (see Config.TopicPrefix and
// Config.TopicMapping). The payload is carried byte for byte; the event's
// fields and the producer's headers travel as MQTT 5 user properties, as
// herald.EventHeaders maps them: Herald-Id, Herald-Topic, Herald-Key,
// Herald-Type, Herald-Aggregate-Type, Herald-Aggregate-Id,
// Herald-Event-Version, Herald-Aggregate-Version, then one property per
// producer header. A consumer turns a received PUBLISH back
// into the event with Parse.
//
// With Config.CloudEvents set, every event is a CloudEvent instead, as the
// CloudEvents MQTT binding says for MQTT 5. In binary mode (the default)
// the attributes are user properties named as the attributes are
// ("id" is the event id, "source", "type", "subject", "time",
// "traceparent", "heraldtopic", ...), datacontenttype is the Content Type
// property, and the payload is the event's. Since a reader takes every user
// property of such a message for an attribute, the producer's other
// headers are not sent in binary mode; use structured mode to keep them.
// In structured mode the payload is the event in the JSON event format,
// the Content Type property heraldce.StructuredContentType, and the
// producer's headers other than Content-Type stay user properties. Herald-*
// are not sent, as the attributes carry the event's fields (see package
// heraldce). Parse reads both modes back.
//
// # What counts as published
//
// An event is published once the broker answered its PUBLISH with a
// PUBACK whose reason code is below 0x80. A PUBACK of 0x10 (No matching
// subscribers) is a success too, unless Config.RequireSubscribers: the
// broker accepted the message and dropped it, as MQTT brokers do with a
// message no subscription (and no persistent session) wants. A PUBACK of
// 0x80 or above is a failure of that event (see ReasonError for how each
// code is reported to the relay). An event whose PUBACK did not come
// because the connection was lost is reported with herald.Unavailable;
// when no event of the batch got an answer, Publish returns a plain
// error, which the relay takes as an outage.
//
// Events that no MQTT broker can take are refused before sending, with
// herald.Permanent: a topic name with a wildcard or, unless allowed, an
// empty level; a string (a header, the key, the type) holding a control
// character or a Unicode non-character, for which a broker such as
// Mosquitto closes the connection; a PUBLISH packet larger than the
// broker's Maximum Packet Size (from its CONNACK) or Config.MaxPacketBytes.
//
// MQTT has no broker-side deduplication: an event the relay republishes
// (after a lost PUBACK or a crash) is delivered again, so consumers
// deduplicate on the event id (the Herald-Id property), as Herald's inbox
// does.
//
// # Order per key
//
// A broker answers each PUBLISH on its own: after a refused one, it takes
// the next. So that no ordered event (herald.Envelope.Ordered) is ever
// delivered after an earlier event of its key failed, Publish sends a
// batch in rounds with herald.SendInRounds: each round sends, without
// waiting in between, the next event of every ordered key (and, in the
// first round, every event that is not ordered), up to the broker's
// Receive Maximum in flight at once, then waits for their PUBACKs. A key
// whose event failed is closed: its later events are reported with
// herald.ErrHeldBack without being sent. A batch of many keys takes one
// round; a batch holding n ordered events of one key takes n round trips.
//
// # Connection
//
// The Publisher owns an autopaho connection manager built from the
// autopaho.ClientConfig given to New, which connects in the background
// and reconnects after a loss. The session is clean (no session kept
// across connections): the outbox, not the MQTT session, keeps what the
// broker has not acknowledged. While the broker cannot be reached,
// Publish fails at once with the last connection error.
//
// # URL form
//
// Importing the package registers mqtt:// and mqtts:// with heraldspec,
// which opens a destination from its URL (ParseURL, URLConfig.Open):
//
//	mqtt[s]://[user[:password]@]host[:port][?options]
//
// The port defaults to 1883, or 8883 for mqtts://; the URL has no path.
// Options: topic-prefix (Config.TopicPrefix), topic-mapping (verbatim or
// dots-to-slashes), allow-empty-levels and require-subscribers (true or
// false), max-packet-bytes, client-id (defaults to the destination's
// ClientName and random hex digits), keepalive (seconds; defaults to
// DefaultKeepAlive) and, for mqtts:// only, ca (a PEM file of the CAs to
// trust instead of the system's roots). The password may come from the
// destination's Password secret instead of the URL, not from both. Open
// tells a broker whose CONNACK refused the credentials, or whose
// certificate is not trusted, from one it could not reach
// (heraldspec.OpenError.Unreachable).
package heraldmqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/paho"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// ErrClosed is returned by Publish and Connect after Close.
var ErrClosed = errors.New("heraldmqtt: publisher closed")

// MaxPacketBytes is the largest packet MQTT can carry: a fixed header of
// five bytes and a remaining length of at most 268,435,455 bytes.
const MaxPacketBytes = 1 + 4 + 268_435_455

// The defaults of Config.ReconnectMinDelay and Config.ReconnectMaxDelay.
const (
	defaultReconnectMinDelay = 100 * time.Millisecond
	defaultReconnectMaxDelay = 10 * time.Second
)

// DefaultKeepAlive is the keep-alive a zero autopaho.ClientConfig.KeepAlive
// is taken as, in seconds: without pings, a connection that died silently
// is only noticed when a write fails.
const DefaultKeepAlive = 30

// Config configures a Publisher. A nil *Config means the defaults.
type Config struct {
	// TopicPrefix is prepended, as it is, to the MQTT topic name of every
	// event: with "herald/", the event topic "orders" is published to
	// "herald/orders". It must not hold a wildcard (+ or #) or a character
	// brokers refuse (see the package documentation), nor start with '$'
	// (reserved for the broker's own topics). Defaults to "" (no prefix).
	TopicPrefix string
	// TopicMapping is how an event topic becomes an MQTT topic name.
	// Defaults to TopicVerbatim.
	TopicMapping TopicMapping
	// AllowEmptyLevels lets an MQTT topic name have an empty level (a
	// leading or trailing '/', or "//"), which MQTT allows but which is
	// most often a mistake. Defaults to false: such an event fails with
	// herald.Permanent.
	AllowEmptyLevels bool
	// MaxPacketBytes is the largest PUBLISH packet (topic, properties and
	// payload) Publish sends; a larger one fails with herald.Permanent
	// without being sent. When the broker announces a Maximum Packet Size
	// in its CONNACK, the smaller of the two applies: a broker closes the
	// connection on a packet over its limit. Defaults to MaxPacketBytes,
	// MQTT's own limit.
	MaxPacketBytes int
	// RequireSubscribers reports an event the broker answered with 0x10
	// (No matching subscribers) as a failure, retried per the relay's
	// retry policy: the broker dropped it. Defaults to false (a success).
	RequireSubscribers bool
	// ReconnectMinDelay and ReconnectMaxDelay bound the backoff between
	// failed connection attempts, used when autopaho.ClientConfig sets
	// neither ReconnectBackoff nor ConnectRetryDelay. They default to
	// 100ms and 10s.
	ReconnectMinDelay, ReconnectMaxDelay time.Duration
	// Logger receives the publisher's logs, and those of autopaho and
	// paho where the client configuration leaves their loggers nil.
	// Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent (the MQTT protocol
	// binding, MQTT 5; see the package documentation), in binary mode
	// (attributes as user properties, without the producer's other
	// headers) or structured mode (the JSON event format as the payload).
	// Defaults to nil: off.
	CloudEvents *heraldce.Config
}

// Publisher is a herald.Publisher over an MQTT 5 connection it owns. It is
// safe for concurrent use; Close it when done.
type Publisher struct {
	cm         *autopaho.ConnectionManager
	topics     topicNamer
	maxPacket  int
	requireSub bool
	ce         *heraldce.Config // nil: CloudEvents off
	links      *links
	log        *slog.Logger

	// ctx ends when the Publisher closes: it ends the publishes of rounds
	// that Publish gave up on, and the connection manager.
	ctx    context.Context
	cancel context.CancelFunc
	// wg counts the goroutines sending rounds, which may outlive the
	// Publish that started them.
	wg sync.WaitGroup
}

var _ herald.Publisher = (*Publisher)(nil)

// New returns a publisher that connects to the broker as client says, and
// starts connecting in the background (Connect waits for the connection).
// Errors name the field at fault.
//
// client is autopaho's own configuration: ServerUrls, TlsCfg,
// ConnectUsername and ConnectPassword, KeepAlive and ClientID take effect
// as autopaho documents them. On top of it:
//
//   - SessionExpiryInterval must be 0 and the first connection starts
//     clean: Herald's outbox keeps what the broker has not acknowledged;
//   - an empty ClientID becomes "herald-" and 16 random hex digits, so
//     that two relays never take over each other's connection;
//   - a zero KeepAlive is taken as DefaultKeepAlive;
//   - OnConnectionUp, OnConnectionDown, OnConnectError and
//     OnServerDisconnect, when set, are called after the Publisher's own;
//   - Debug, Errors, PahoDebug and PahoErrors, when nil, write to
//     Config.Logger: the errors at Warn, autopaho's debug lines at Debug,
//     paho's per-packet ones at slog.LevelDebug-4.
//
// Neither New's errors nor the Publisher's logs hold ConnectPassword.
func New(client autopaho.ClientConfig, cfg *Config) (*Publisher, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.MaxPacketBytes == 0 {
		c.MaxPacketBytes = MaxPacketBytes
	}
	if c.ReconnectMinDelay == 0 {
		c.ReconnectMinDelay = defaultReconnectMinDelay
	}
	if c.ReconnectMaxDelay == 0 {
		c.ReconnectMaxDelay = defaultReconnectMaxDelay
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := validate(&client, &c); err != nil {
		return nil, err
	}
	if c.CloudEvents != nil {
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	namer, _ := newTopicNamer(c.TopicPrefix, c.TopicMapping, c.AllowEmptyLevels) // checked by validate
	log := c.Logger.With("component", "herald.mqtt")
	ctx, cancel := context.WithCancel(context.Background())
	p := &Publisher{
		topics:     namer,
		maxPacket:  c.MaxPacketBytes,
		requireSub: c.RequireSubscribers,
		ce:         c.CloudEvents,
		links:      newLinks(log, servers(&client)),
		log:        log,
		ctx:        ctx,
		cancel:     cancel,
	}
	if err := p.configure(&client, &c); err != nil {
		cancel()
		return nil, err
	}
	setLibraryLoggers(&client, c.Logger)
	cm, err := autopaho.NewConnection(ctx, client)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("heraldmqtt: %s", herald.Scrub(err.Error()))
	}
	p.cm = cm
	return p, nil
}

func validate(client *autopaho.ClientConfig, c *Config) error {
	switch {
	case len(client.ServerUrls) == 0 && len(client.BrokerUrls) == 0:
		return errors.New("heraldmqtt: autopaho.ClientConfig.ServerUrls is empty")
	case client.SessionExpiryInterval != 0:
		return errors.New("heraldmqtt: autopaho.ClientConfig.SessionExpiryInterval must be 0: " +
			"the outbox, not an MQTT session, keeps the events the broker has not acknowledged")
	case client.Queue != nil:
		return errors.New("heraldmqtt: autopaho.ClientConfig.Queue must be nil: Publish waits for each PUBACK itself")
	}
	return c.Validate()
}

// Validate reports the first field of c that New would refuse, naming it;
// zero fields stand for their defaults. It connects to nothing, so that a
// program can check its configuration before it dials.
func (c Config) Validate() error {
	if c.MaxPacketBytes == 0 {
		c.MaxPacketBytes = MaxPacketBytes
	}
	if c.ReconnectMinDelay == 0 {
		c.ReconnectMinDelay = defaultReconnectMinDelay
	}
	if c.ReconnectMaxDelay == 0 {
		c.ReconnectMaxDelay = defaultReconnectMaxDelay
	}
	if _, err := newTopicNamer(c.TopicPrefix, c.TopicMapping, c.AllowEmptyLevels); err != nil {
		return err
	}
	switch {
	case c.TopicMapping != TopicVerbatim && c.TopicMapping != TopicDotsToSlashes:
		return fmt.Errorf("heraldmqtt: Config.TopicMapping %d is not a TopicMapping", c.TopicMapping)
	case c.MaxPacketBytes < 0 || c.MaxPacketBytes > MaxPacketBytes:
		return fmt.Errorf("heraldmqtt: Config.MaxPacketBytes must be between 1 and %d", MaxPacketBytes)
	case c.ReconnectMinDelay < 0:
		return errors.New("heraldmqtt: Config.ReconnectMinDelay must not be negative")
	case c.ReconnectMaxDelay <= c.ReconnectMinDelay:
		return errors.New("heraldmqtt: Config.ReconnectMaxDelay must be more than Config.ReconnectMinDelay")
	}
	if c.CloudEvents != nil {
		return c.CloudEvents.Validate("heraldmqtt: Config.CloudEvents")
	}
	return nil
}

// configure sets what the Publisher needs of the client configuration: a
// clean session, a client id, a keep-alive, a backoff, and its callbacks
// in front of the user's.
func (p *Publisher) configure(client *autopaho.ClientConfig, c *Config) error {
	client.CleanStartOnInitialConnection = true
	if client.ClientID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return fmt.Errorf("heraldmqtt: making a client id: %w", err)
		}
		client.ClientID = "herald-" + hex.EncodeToString(b[:])
	}
	if client.KeepAlive == 0 {
		client.KeepAlive = DefaultKeepAlive
	}
	if client.ReconnectBackoff == nil && client.ConnectRetryDelay == 0 { //nolint:staticcheck // a deprecated setting still honoured by autopaho, so still the user's choice
		// Full jitter between the bounds, doubling: relays restarted
		// together do not reconnect in step.
		client.ReconnectBackoff = autopaho.NewExponentialBackoff(
			max(c.ReconnectMinDelay, time.Millisecond), c.ReconnectMaxDelay,
			min(max(2*c.ReconnectMinDelay, time.Millisecond), c.ReconnectMaxDelay), 2)
	}
	up, down, failed, bye := client.OnConnectionUp, client.OnConnectionDown, client.OnConnectError, client.OnServerDisconnect
	client.OnConnectionUp = func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
		p.links.up(ca)
		if up != nil {
			up(cm, ca)
		}
	}
	client.OnConnectionDown = func() bool {
		p.links.down()
		return down == nil || down()
	}
	client.OnConnectError = func(err error) {
		p.links.failed(err)
		if failed != nil {
			failed(err)
		}
	}
	client.OnServerDisconnect = func(d *paho.Disconnect) {
		p.links.disconnected(d)
		if bye != nil {
			bye(d)
		}
	}
	return nil
}

// Connect waits until the publisher is connected, and reports, within
// ctx, whether it could be: the last connection attempt's error when it
// failed.
func (p *Publisher) Connect(ctx context.Context) error {
	if !p.links.enter() {
		return ErrClosed
	}
	defer p.links.exit()
	_, err := p.links.current(ctx)
	return err
}

// Close disconnects from the broker and waits for the publisher's
// goroutines to end. A Publish in progress fails. Closing twice does
// nothing.
func (p *Publisher) Close() error {
	if !p.links.close() {
		return nil
	}
	p.cancel()
	<-p.cm.Done()
	// No Publish is in progress once calls are done, so no round adds to
	// wg while it is waited for.
	p.links.calls.Wait()
	p.wg.Wait()
	return nil
}

// Publish sends the batch in rounds (see the package documentation) and
// waits for the broker's PUBACKs. It returns nil only when the broker
// accepted every event; a *herald.BatchError when some events failed; and
// a plain error when no event got an answer because the broker is
// unreachable, the connection was lost, or ctx ended first.
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("heraldmqtt: not published: %w", context.Cause(ctx))
	}
	if !p.links.enter() {
		return ErrClosed
	}
	defer p.links.exit()
	l, err := p.links.current(ctx)
	if err != nil {
		return err
	}
	if l.maxQoS < 1 {
		// Every event would fail alike: the broker, not the events, is at
		// fault.
		return errors.New("heraldmqtt: the broker takes no QoS 1 publish (its CONNACK says Maximum QoS 0)")
	}

	s := &sending{p: p, l: l, batch: batch}
	errs := herald.SendInRounds(ctx, batch, 1, s.round)
	result := herald.BatchResult(errs)
	switch {
	case result == nil:
		p.log.Debug("published batch", "batch_size", len(batch), "rounds", s.rounds)
		return nil
	case s.answered == 0:
		// Nothing reached the broker and came back: the broker or the
		// connection is at fault, not the events, and the relay takes a
		// plain error as an outage.
		cause := s.stopped
		if cause == nil {
			cause = firstError(errs)
		}
		return fmt.Errorf("heraldmqtt: no event of %d acknowledged: %w", len(batch), cause)
	}
	return result
}

// servers names the client's brokers for logs: their addresses, without
// any user information a URL may hold.
func servers(client *autopaho.ClientConfig) string {
	urls := client.ServerUrls
	if len(urls) == 0 {
		urls = client.BrokerUrls
	}
	hosts := make([]string, len(urls))
	for i, u := range urls {
		hosts[i] = u.Host
	}
	return strings.Join(hosts, ",")
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
