// Package heraldpubsub publishes Herald events to Google Cloud Pub/Sub.
//
// Each event becomes one message published to the topic whose ID is the
// event's topic (after an optional TopicPrefix), in Config.Project. The
// message data is the payload byte for byte; its attributes are the
// producer's headers and Herald's own (herald.EventHeaders: Herald-Id,
// Herald-Topic, Herald-Type, Herald-Key, ...). An ordered event
// (herald.Envelope.Ordered) carries its key as the message's ordering key;
// an event with an empty key, or on a topic the relay does not order, has
// none. A consumer turns a received message back into the event with Parse.
//
// With Config.CloudEvents set, every event is a CloudEvent instead, as the
// CloudEvents Pub/Sub binding says: in binary mode (the default) the
// attributes are message attributes named "ce-" and the attribute ("ce-id"
// is the event id), datacontenttype is the Content-Type attribute, and the
// data is the payload; in structured mode the data is the event in the JSON
// event format and the Content-Type attribute
// heraldce.StructuredContentType. The producer's other headers stay
// attributes; Herald-* are not sent, as the CloudEvents attributes carry
// the event's fields (see package heraldce). The ordering key is the
// event's key either way. Parse reads both modes back.
//
// # URL form
//
// Imported, the package registers pubsub:// with heraldspec (ParseURL):
//
//	pubsub://PROJECT[?emulator=HOST:PORT&prefix=PREFIX]
//
// prefix is Config.TopicPrefix; emulator, or else PUBSUB_EMULATOR_HOST from
// the Destination's Getenv, reaches an emulator (EmulatorOptions), which
// takes any project name. Credentials are never in the URL: the client
// takes Application Default Credentials. Open makes the client (NewClient)
// and pings the service: no answer is unreachable, Unauthenticated is not.
//
// # What counts as published
//
// Publish reports an event as published only once the service answered
// its publish with a message ID. Pub/Sub does not drop an event the relay
// publishes twice (after a lost answer or a crash): each publish is a new
// message with a new message ID. Consumers deduplicate on the Herald-Id
// attribute, as Herald's inbox does; Pub/Sub's exactly-once delivery is a
// subscription setting that concerns redelivery of one message ID, not
// republished events.
//
// # Order per key
//
// Consumers see a key's events in order only through a subscription with
// message ordering enabled, and only for messages published in one region:
// keep the relays of a topic on one endpoint.
//
// The client sends the messages of an ordering key one request at a time
// and, when one fails, pauses the key: every later message of the key
// still queued in the client fails too, unsent, until ResumePublish is
// called for the key. Publish relies on that, so a batch is one round
// (herald.SendInRounds with every event of a key in it): all messages are
// handed to the client at once, and the events of a key after its first
// failed one are reported with herald.ErrHeldBack. Failures it can foresee
// (a message too large, an attribute Pub/Sub refuses, a topic ID it
// refuses) are found before anything is sent, and the later events of the
// key are held back without being handed to the client.
//
// Publish resumes a paused key itself once no message of the key is left in
// the client, so that the relay's retry goes through. It never resumes a
// key earlier: a message still queued would then go out after the one that
// failed.
//
// # Errors
//
// Results are per event, in a *herald.BatchError. A message over
// Config.MaxMessageBytes, an attribute over Pub/Sub's limits and a topic ID
// Pub/Sub refuses are herald.Permanent. Refusals for load and an
// unreachable service (gRPC ResourceExhausted, Unavailable), credentials
// that are refused or lack the permission to publish (Unauthenticated,
// PermissionDenied), and a key paused by an earlier failure whose messages
// are still being answered are herald.Unavailable: they cost the event no
// attempt. A topic that does not exist (NotFound) is an ordinary failure
// that says so. When the service answered for no event at all, Publish
// returns a plain error, which the relay takes as an outage.
//
// The client retries some failures itself before Herald sees them. A
// client made by NewClient retries only Aborted, Internal and Unknown, so
// that throttling and an unreachable service come back to the relay, which
// backs off without spending attempts; a client with the library's default
// settings also retries ResourceExhausted and Unavailable until
// Config.Timeout, and such a failure then reaches Herald as a timeout.
package heraldpubsub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"cloud.google.com/go/pubsub/v2"
	vkit "cloud.google.com/go/pubsub/v2/apiv1"
	pb "cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	gax "github.com/googleapis/gax-go/v2"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// DefaultMaxMessageBytes is the default Config.MaxMessageBytes: 10 MB,
// Pub/Sub's limit on one publish request and so on one message.
const DefaultMaxMessageBytes = int(pubsub.MaxPublishRequestBytes)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("heraldpubsub: publisher closed")

// Config configures a Publisher. A nil *Config means the defaults.
type Config struct {
	// Project is the Google Cloud project that holds the topics. Defaults
	// to the client's project.
	Project string
	// TopicPrefix is prepended, as is, to every event topic to make the
	// Pub/Sub topic ID: with "prod-", the topic "orders" is published to
	// the topic ID "prod-orders". Defaults to "" (the event's topic is the
	// topic ID).
	TopicPrefix string
	// MaxMessageBytes is the largest message Publish sends, counted as the
	// encoded message: payload, attributes and ordering key. A larger one
	// is reported with herald.Permanent without being sent. At most, and
	// defaults to, DefaultMaxMessageBytes.
	MaxMessageBytes int
	// Timeout bounds the client's attempts to publish one request of
	// messages (pubsub.PublishSettings.Timeout). Defaults to 15s, within
	// the relay's default PublishTimeout, so that an unanswered batch is
	// reported before the relay gives up on it.
	Timeout time.Duration
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent (the Pub/Sub protocol
	// binding; see the package documentation), in binary mode (ce-*
	// attributes) or structured mode (the JSON event format as the data).
	// Defaults to nil: off.
	CloudEvents *heraldce.Config
}

// Publisher is a herald.Publisher over a Pub/Sub client. It is safe for
// concurrent use. Close it when done: it stops the client's publishers of
// the topics it used (the client itself stays the caller's).
type Publisher struct {
	client   *pubsub.Client
	project  string
	prefix   string
	maxBytes int
	timeout  time.Duration
	ce       *heraldce.Config // nil: CloudEvents off
	log      *slog.Logger

	mu     sync.Mutex
	closed bool
	topics map[string]*pubsub.Publisher // by topic ID
	// settling counts the goroutines that wait for the answers of an
	// abandoned Publish (see settleLater).
	settling sync.WaitGroup

	keys inFlight
}

var _ herald.Publisher = (*Publisher)(nil)

// New returns a publisher over client, which the caller owns (and closes
// after closing the publisher). Errors name the Config field at fault.
func New(client *pubsub.Client, cfg *Config) (*Publisher, error) {
	if client == nil {
		return nil, errors.New("heraldpubsub: New: client is nil")
	}
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Project == "" {
		c.Project = client.Project()
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.Timeout == 0 {
		c.Timeout = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Project == "" || strings.ContainsAny(c.Project, "/ \t\r\n"):
		return nil, errors.New("heraldpubsub: Config.Project must be a project ID (no '/' or spaces)")
	case c.MaxMessageBytes < 0 || c.MaxMessageBytes > DefaultMaxMessageBytes:
		return nil, fmt.Errorf("heraldpubsub: Config.MaxMessageBytes must be between 1 and %d, Pub/Sub's limit", DefaultMaxMessageBytes)
	case c.Timeout < 0:
		return nil, errors.New("heraldpubsub: Config.Timeout must not be negative")
	}
	if err := CheckTopicPrefix(c.TopicPrefix); err != nil {
		return nil, fmt.Errorf("heraldpubsub: Config.TopicPrefix %w", err)
	}
	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate("heraldpubsub: Config.CloudEvents"); err != nil {
			return nil, err
		}
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	return &Publisher{
		client:   client,
		project:  c.Project,
		prefix:   c.TopicPrefix,
		maxBytes: c.MaxMessageBytes,
		timeout:  c.Timeout,
		ce:       c.CloudEvents,
		log:      c.Logger.With("component", "herald.pubsub"),
		topics:   map[string]*pubsub.Publisher{},
		keys:     inFlight{keys: map[keyRef]*keyState{}},
	}, nil
}

// NewClient returns a Pub/Sub client for project that retries a failed
// publish request itself only for Aborted, Internal and Unknown: throttling
// (ResourceExhausted) and an unreachable service (Unavailable) come back to
// Publish at once, which reports them with herald.Unavailable so that the
// relay backs off without spending attempts. opts follow the library's
// (credentials, an endpoint; EmulatorOptions for an emulator); without
// any, the client uses Application Default Credentials. The caller closes
// the client.
func NewClient(ctx context.Context, project string, opts ...option.ClientOption) (*pubsub.Client, error) {
	retry := func() gax.Retryer {
		return gax.OnCodes([]codes.Code{codes.Aborted, codes.Internal, codes.Unknown}, gax.Backoff{
			Initial: 100 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2,
		})
	}
	cfg := &pubsub.ClientConfig{TopicAdminCallOptions: &vkit.TopicAdminCallOptions{
		Publish: []gax.CallOption{gax.WithRetry(retry)},
	}}
	c, err := pubsub.NewClientWithConfig(ctx, project, cfg, opts...)
	if err != nil {
		return nil, fmt.Errorf("heraldpubsub: NewClient: %s", herald.Scrub(err.Error()))
	}
	return c, nil
}

// EmulatorOptions are the client options that reach the Pub/Sub emulator
// (or pstest) at hostport: plaintext gRPC, no credentials. They are what
// the client itself uses when PUBSUB_EMULATOR_HOST is set.
func EmulatorOptions(hostport string) []option.ClientOption {
	return []option.ClientOption{
		option.WithEndpoint(hostport),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())),
		option.WithoutAuthentication(),
		option.WithTelemetryDisabled(),
	}
}

// Ping asks the service for a topic of the project and reports whether it
// answered. It returns nil also when the service answered PermissionDenied:
// an account that may only publish (roles/pubsub.publisher) may not list
// topics, and the answer shows the service reachable and the credentials
// taken. It returns an error when the service is unreachable, refused the
// credentials (Unauthenticated) or knows no such project.
//
// It asks once, without the client's retries: a caller that waits for the
// service asks again at its own pace.
func (p *Publisher) Ping(ctx context.Context) error {
	once := gax.WithRetry(func() gax.Retryer { return nil })
	it := p.client.TopicAdminClient.ListTopics(ctx, &pb.ListTopicsRequest{Project: "projects/" + p.project, PageSize: 1}, once)
	_, err := it.Next()
	if err == nil || errors.Is(err, iterator.Done) || status.Code(err) == codes.PermissionDenied {
		return nil
	}
	return fmt.Errorf("heraldpubsub: asking Pub/Sub for the topics of project %q: %w", p.project, err)
}

// Close stops the client's publishers of the topics p used, which sends
// what they still hold and waits for the answers. A Publish in progress
// fails. Closing twice does nothing.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	topics := p.topics
	p.topics = nil
	p.mu.Unlock()
	for _, t := range topics {
		t.Stop()
	}
	p.settling.Wait()
	return nil
}

// topic returns the client's publisher for a topic ID, nil after Close.
func (p *Publisher) topic(id string) *pubsub.Publisher {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	t := p.topics[id]
	if t == nil {
		t = p.client.Publisher("projects/" + p.project + "/topics/" + id)
		t.EnableMessageOrdering = true
		// Publish waits for every message of its batch, all handed over
		// at once: a request held back to fill up only adds latency.
		t.PublishSettings.DelayThreshold = time.Millisecond
		t.PublishSettings.CountThreshold = pubsub.MaxPublishRequestCount
		t.PublishSettings.Timeout = p.timeout
		p.topics[id] = t
	}
	return t
}

// Publish hands the batch to the client in one round (see the package
// documentation) and waits for the service's answers. It returns nil only
// when every event got a message ID; a *herald.BatchError when some events
// failed; and a plain error when the service answered for no event, the
// publisher is closed, or ctx ended first.
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("heraldpubsub: not published: %w", context.Cause(ctx))
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return ErrClosed
	}
	s := &sending{p: p, batch: batch}
	// The client stops a key at its first failure (see the package
	// documentation), so every event of a key may share the one round.
	errs := herald.SendInRounds(ctx, batch, len(batch), s.round)
	result := herald.BatchResult(errs)
	switch {
	case result == nil:
		p.log.Debug("published batch", "batch_size", len(batch))
		return nil
	case s.answered == 0:
		// Nothing came back about the events themselves: the service is
		// unreachable or refusing everything, an outage rather than a
		// failure of these events.
		return fmt.Errorf("heraldpubsub: no event of %d confirmed: %w", len(batch), firstError(errs))
	}
	return result
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// MaxMessageBytes is Config.MaxMessageBytes, the largest message the
// publisher sends. A claim check configured by URL offloads the events
// above it (heraldclaim.Limited).
func (p *Publisher) MaxMessageBytes() int { return p.maxBytes }
