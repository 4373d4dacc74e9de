// Package heraldwebhook publishes Herald events as HTTP webhooks signed
// per the Standard Webhooks specification.
//
// Each event is one POST to the URL of its topic (Config.Endpoints, or
// Config.Default). The body is the payload, byte for byte, with the
// producer's Content-Type header or application/json. The request carries:
//
//   - webhook-id: the event id, the same on every attempt, for the
//     receiver to drop duplicates (delivery is at least once);
//   - webhook-timestamp: the attempt's time in unix seconds;
//   - webhook-signature: "v1," and the base64 HMAC-SHA256 of
//     "id.timestamp.body" under the endpoint's secret; during a secret
//     rollover (Endpoint.PreviousSecret), a second such signature under
//     the previous secret, after a space;
//   - Herald-Id, Herald-Topic, Herald-Key, Herald-Type and the aggregate
//     headers, when set, Herald-Event-Version (always) and
//     Herald-Aggregate-Version (when set; a receiver reads both with
//     herald.ParseVersions), and the producer's headers, as herald.EventHeaders
//     maps them: a name a producer may not use (webhook-*, Herald-*,
//     hop-by-hop and framing headers such as Connection, Transfer-Encoding,
//     Host and Content-Length; see herald.ValidateHeaderName) is dropped
//     even when a row inserted by SQL carries it, and so are the names
//     only HTTP acts on (Expect, Proxy-*) and User-Agent, which the
//     publisher sets itself.
//
// Receivers check a request with Verify.
//
// # Results
//
// A 2xx answer confirms the event. 408, 429 and 5xx answers, timeouts and
// connection errors are retryable; a Retry-After header is kept on the
// *StatusError (see RetryAfter). Redirects are never followed, to the same
// host or another: a 3xx is a retryable error that asks for the endpoint's
// URL to be updated. Any other 4xx is permanent (herald.Permanent). When
// every request of a batch failed to reach its endpoint (connection
// refused, reset, timed out), Publish returns a plain error, which the
// relay treats as an outage; otherwise a *herald.BatchError. A connection
// the address guard refused is no outage (see RefusedDestinationError).
//
// # Order per key
//
// Publish sends a batch in rounds with herald.SendInRounds: each round posts
// the next event of every ordered key (herald.Envelope.Ordered) and, in the
// first round, every event that is not ordered, in parallel up to
// Config.MaxConcurrency requests at once; the next round starts once every
// request of the round was answered. So the events of an ordered key go
// one after the other, in batch order, each only once the previous one was
// confirmed; after a failure the key's later events are reported with
// herald.ErrHeldBack without being sent. A batch holding n events of one
// key takes n rounds, each as long as its slowest request. Events that are
// not ordered (no key, or a topic the relay does not order) are never held
// back.
//
// # Internal destinations
//
// The publisher refuses to connect to private, loopback, link-local,
// unique-local, unspecified, multicast and other special-purpose
// addresses, unless Config.AllowedNetworks or Config.AllowPrivate allows
// them. New refuses an endpoint URL whose host is such an address. The
// check also runs on every connection, on the address it is about to dial
// after name resolution, so a public name that resolves (or rebinds) to an
// internal address is refused as well: its events fail and are retried
// like any failed event, and Publisher.Refused names the endpoint. Proxies
// from the environment (HTTP_PROXY) are not used: the guard would
// otherwise only see the proxy.
//
// # URL form
//
// Imported, the package registers http:// and https:// with heraldspec:
// a destination URL is the endpoint every event goes to (Config.Default),
// its path and query the receiver's, so it takes no options. Its signing
// secrets are the destination's Secret and PreviousSecret secrets, else
// Config.Secret and Config.PreviousSecret of the Destination's Config,
// which also gives the allow-list (Config.AllowedNetworks) and the other
// settings. heraldspec.Parse checks the whole configuration, as New does;
// Open connects to nothing.
//
// # Secrets
//
// Signing secrets never appear in errors, logs or the String form of a
// Config or Publisher. Endpoint URLs are reduced to their origin
// (scheme://host:port) wherever the publisher reports them, since their
// path or query often carries a token.
package heraldwebhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
)

// Defaults of Config.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultMaxConcurrency = 16
	DefaultUserAgent      = "herald-webhook"
)

// Endpoint is where the events of a topic go.
type Endpoint struct {
	// URL receives one POST per event: http or https, with a host. Its path
	// and query are kept out of errors and logs. Required.
	URL string
	// Secret signs the endpoint's requests, a Standard Webhooks secret:
	// "whsec_" then the base64 of a 24 to 64 byte key. Defaults to
	// Config.Secret.
	Secret string
	// PreviousSecret, during a secret rollover, is the secret being
	// retired: every request is signed under Secret and under
	// PreviousSecret, so that receivers still verifying with the previous
	// secret and receivers already on the new one both accept it (see
	// VerifyAny). It goes with Secret: an endpoint without a Secret of its
	// own takes Config.Secret and Config.PreviousSecret together. Defaults
	// to "": one signature.
	PreviousSecret string
}

// String shows the endpoint without its secrets, its path or its query.
func (e Endpoint) String() string {
	return fmt.Sprintf("{URL:%s Secret:%s%s}", origin(e.URL), setOrNone(e.Secret), previousSet(e.PreviousSecret))
}

// previousSet stands for a PreviousSecret in String forms: said only when
// set, so that the forms of configurations without one stay as they were.
func previousSet(previous string) string {
	if previous == "" {
		return ""
	}
	return " PreviousSecret:set"
}

// setOrNone stands for a secret in String forms.
func setOrNone(secret string) string {
	if secret == "" {
		return "none"
	}
	return "set"
}

// GoString keeps %#v from printing the secret.
func (e Endpoint) GoString() string { return "heraldwebhook.Endpoint" + e.String() }

// LogValue keeps slog handlers from printing the secret.
func (e Endpoint) LogValue() slog.Value { return slog.StringValue(e.String()) }

// Config configures a Publisher. New requires at least one endpoint and a
// secret for each.
type Config struct {
	// Endpoints maps exact topic names to their endpoints. Defaults to
	// none.
	Endpoints map[string]Endpoint
	// Default receives the events of topics not in Endpoints. Defaults to
	// none (URL ""): such an event fails permanently.
	Default Endpoint
	// Secret signs the requests of every endpoint without a Secret of its
	// own (see Endpoint.Secret). Defaults to "".
	Secret string
	// PreviousSecret is the retiring secret of a rollover of Secret, for
	// the endpoints that take Secret (see Endpoint.PreviousSecret).
	// Defaults to "".
	PreviousSecret string
	// Timeout bounds each request, from dialling to the end of the answer.
	// Defaults to DefaultTimeout (10s).
	Timeout time.Duration
	// MaxConcurrency bounds the requests one Publish call has in flight
	// (never two of one ordered key). Defaults to DefaultMaxConcurrency
	// (16).
	MaxConcurrency int
	// AllowedNetworks lists CIDR prefixes ("10.20.0.0/16", "127.0.0.0/8")
	// the publisher may connect to although they are private or
	// special-purpose. Public addresses are always allowed. Defaults to
	// none.
	AllowedNetworks []string
	// AllowPrivate allows every destination, turning the address guard
	// off. Defaults to false.
	AllowPrivate bool
	// AllowHint is how an operator allows a refused address, as every
	// refusal says it ("allow it with ..."): a program that sets
	// AllowedNetworks from its own flag or variable names that here.
	// Defaults to "Config.AllowedNetworks or Config.AllowPrivate".
	AllowHint string
	// TLSConfig configures https connections (root CAs, client
	// certificates). Defaults to nil: the system's roots.
	TLSConfig *tls.Config
	// UserAgent is the User-Agent of every request. Defaults to
	// DefaultUserAgent ("herald-webhook").
	UserAgent string
	// Logger receives the publisher's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// CloudEvents sends each event as a CloudEvent (HTTP protocol binding
	// 1.0.2) in binary mode (ce-* headers, the payload as the body; the
	// default) or structured mode (the JSON event format as the body, the
	// signature covering it); see package heraldce for the attributes.
	// Receivers read it back with heraldce.ParseHTTP. The webhook-*
	// signing headers are sent in both modes. Defaults to nil: off.
	CloudEvents *heraldce.Config
}

// String shows the configuration without secrets, paths or queries.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("{Endpoints:map[")
	topics := make([]string, 0, len(c.Endpoints))
	for t := range c.Endpoints {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	for i, t := range topics {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s:%s", t, c.Endpoints[t])
	}
	fmt.Fprintf(&b, "] Default:%s Secret:%s%s Timeout:%s MaxConcurrency:%d AllowedNetworks:%v AllowPrivate:%t UserAgent:%q",
		c.Default, setOrNone(c.Secret), previousSet(c.PreviousSecret), c.Timeout, c.MaxConcurrency, c.AllowedNetworks, c.AllowPrivate, c.UserAgent)
	if c.CloudEvents != nil {
		fmt.Fprintf(&b, " CloudEvents:%+v", *c.CloudEvents)
	}
	b.WriteByte('}')
	return b.String()
}

// GoString keeps %#v from printing secrets.
func (c Config) GoString() string { return "heraldwebhook.Config" + c.String() }

// LogValue keeps slog handlers from printing secrets.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

// endpoint is a validated Endpoint.
type endpoint struct {
	field  string // Config.Endpoints["topic"] or Config.Default
	url    string
	host   string   // the URL's host, without port or brackets
	origin string   // scheme://host:port, for errors and logs
	keys   [][]byte // the secret's, then the previous secret's in a rollover
	// refused is the address guard's refusal of the last request, nil
	// once a request was answered.
	refused atomic.Pointer[RefusedDestinationError]
}

// Publisher is a herald.Publisher that POSTs each event to its topic's
// webhook endpoint. Close it to release its idle connections.
type Publisher struct {
	endpoints map[string]*endpoint
	def       *endpoint
	transport *http.Transport
	client    *http.Client
	timeout   time.Duration
	maxConc   int
	userAgent string
	ce        *heraldce.Config // nil: CloudEvents off
	log       *slog.Logger
	summary   string
}

var _ herald.Publisher = (*Publisher)(nil)

// New validates cfg and returns a publisher. Its errors name the field at
// fault and never contain a secret or an endpoint's path or query.
func New(cfg *Config) (*Publisher, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = DefaultMaxConcurrency
	}
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	fail := func(format string, args ...any) (*Publisher, error) {
		return nil, fmt.Errorf("heraldwebhook: "+format, args...)
	}
	switch {
	case c.Timeout < 0:
		return fail("Config.Timeout must not be negative")
	case c.MaxConcurrency < 0:
		return fail("Config.MaxConcurrency must not be negative")
	case len(c.Endpoints) == 0 && c.Default == (Endpoint{}):
		return fail("Config.Endpoints: at least one endpoint, or Config.Default, is required")
	case !validHeaderValue(c.UserAgent):
		return fail("Config.UserAgent: contains a control character")
	}
	if c.CloudEvents != nil {
		if err := c.CloudEvents.Validate("heraldwebhook: Config.CloudEvents"); err != nil {
			return nil, err
		}
		ce := *c.CloudEvents
		c.CloudEvents = &ce
	}
	if c.Secret != "" {
		if _, err := parseSecret("Config.Secret", c.Secret); err != nil {
			return fail("%v", err)
		}
	}
	if err := checkPrevious("Config", c.Secret, c.PreviousSecret); err != nil {
		return fail("%v", err)
	}
	p := &Publisher{
		endpoints: make(map[string]*endpoint, len(c.Endpoints)),
		timeout:   c.Timeout,
		maxConc:   c.MaxConcurrency,
		userAgent: c.UserAgent,
		ce:        c.CloudEvents,
		log:       c.Logger.With("component", "herald.webhook"),
	}
	for topic, e := range c.Endpoints {
		if topic == "" {
			return fail("Config.Endpoints: a topic name is empty")
		}
		ep, err := newEndpoint(fmt.Sprintf("Config.Endpoints[%q]", topic), e, c.Secret, c.PreviousSecret)
		if err != nil {
			return fail("%v", err)
		}
		p.endpoints[topic] = ep
	}
	if c.Default != (Endpoint{}) {
		ep, err := newEndpoint("Config.Default", c.Default, c.Secret, c.PreviousSecret)
		if err != nil {
			return fail("%v", err)
		}
		p.def = ep
	}

	g := &guard{allowAll: c.AllowPrivate, hint: c.AllowHint}
	if g.hint == "" {
		g.hint = "Config.AllowedNetworks or Config.AllowPrivate"
	}
	for i, s := range c.AllowedNetworks {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return fail("Config.AllowedNetworks[%d]: %q is not a CIDR prefix such as 10.0.0.0/8", i, s)
		}
		g.allowed = append(g.allowed, prefix.Masked())
	}
	for _, ep := range p.all() {
		// A literal address is known now: refusing it at every request
		// would only hide a configuration error in the dead letters.
		if addr, err := netip.ParseAddr(ep.host); err == nil {
			if r := g.refusal(addr); r != nil {
				return nil, &endpointRefusedError{where: ep.field + ".URL", err: r}
			}
		}
	}

	dialer := &net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second, Control: g.control}
	p.transport = &http.Transport{
		Proxy:                  nil, // see "Internal destinations" in the package doc
		DialContext:            dialer.DialContext,
		TLSClientConfig:        c.TLSConfig.Clone(),
		TLSHandshakeTimeout:    c.Timeout,
		ForceAttemptHTTP2:      true,
		MaxIdleConnsPerHost:    c.MaxConcurrency,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		// Answers are drained and dropped: no need to ask for gzip.
		DisableCompression: true,
	}
	p.client = &http.Client{
		Transport: p.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			// A redirect could lead anywhere, another host included; the
			// 3xx becomes the result instead (see StatusError).
			return http.ErrUseLastResponse
		},
	}
	p.summary = fmt.Sprintf("heraldwebhook.Publisher{endpoints:%d default:%t timeout:%s max_concurrency:%d}",
		len(p.endpoints), p.def != nil, p.timeout, p.maxConc)
	return p, nil
}

func newEndpoint(field string, e Endpoint, secret, previous string) (*endpoint, error) {
	if e.URL == "" {
		return nil, fmt.Errorf("%s.URL: required", field)
	}
	u, err := url.Parse(e.URL)
	if err != nil {
		// url.Parse's error quotes the whole URL: say nothing of it.
		return nil, fmt.Errorf("%s.URL: not a valid URL", field)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s.URL: the scheme must be http or https", field)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%s.URL: a host is required", field)
	}
	if e.Secret != "" || e.PreviousSecret != "" {
		if err := checkPrevious(field, e.Secret, e.PreviousSecret); err != nil {
			return nil, err
		}
		secret, previous = e.Secret, e.PreviousSecret
	}
	if secret == "" {
		return nil, fmt.Errorf("%s.Secret is required, or set Config.Secret", field)
	}
	key, err := parseSecret(field+".Secret", secret)
	if err != nil {
		return nil, err
	}
	keys := [][]byte{key}
	if previous != "" {
		// checkPrevious parsed it.
		prev, _ := parseSecret(field+".PreviousSecret", previous)
		keys = append(keys, prev)
	}
	return &endpoint{field: field, url: u.String(), host: u.Hostname(), origin: u.Scheme + "://" + u.Host, keys: keys}, nil
}

// checkPrevious checks the PreviousSecret of field (Config or an Endpoint)
// against its Secret: it goes with one, is valid, and is another secret.
func checkPrevious(field, secret, previous string) error {
	switch {
	case previous == "":
		return nil
	case secret == "":
		return fmt.Errorf("%s.PreviousSecret goes with %s.Secret, the secret that replaces it", field, field)
	case previous == secret:
		return fmt.Errorf("%s.PreviousSecret is the same as %s.Secret; give the retiring secret", field, field)
	}
	_, err := parseSecret(field+".PreviousSecret", previous)
	return err
}

// all returns the endpoints, the default last, the others by field.
func (p *Publisher) all() []*endpoint {
	out := make([]*endpoint, 0, len(p.endpoints)+1)
	for _, ep := range p.endpoints {
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b *endpoint) int { return strings.Compare(a.field, b.field) })
	if p.def != nil {
		out = append(out, p.def)
	}
	return out
}

// origin returns scheme://host:port of a URL, or "(invalid URL)".
func origin(raw string) string {
	if raw == "" {
		return `""`
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid URL)"
	}
	return u.Scheme + "://" + u.Host
}

// String describes the publisher without secrets or URLs.
func (p *Publisher) String() string { return p.summary }

// Refused returns the address guard's refusals of the endpoints whose last
// request it refused, one error per endpoint naming its origin and Config
// field, joined; nil when there is none. Such an endpoint has a host name
// that resolves to an address the guard refuses (see
// RefusedDestinationError): a configuration error for an operator to see,
// in a readiness check for instance. An endpoint leaves the list once a
// request to it is answered.
func (p *Publisher) Refused() error {
	var errs []error
	for _, ep := range p.all() {
		if r := ep.refused.Load(); r != nil {
			errs = append(errs, &endpointRefusedError{where: "endpoint " + ep.origin + " (" + ep.field + ")", err: r})
		}
	}
	return errors.Join(errs...)
}

// Close closes the publisher's idle connections. A Publish in flight
// completes; a later Publish opens new connections.
func (p *Publisher) Close() error {
	p.transport.CloseIdleConnections()
	return nil
}

// outcome says how one event's request ended, to tell an outage apart.
type outcome uint8

const (
	notSent     outcome = iota // no request: held back, invalid, cancelled
	answered                   // the endpoint answered, 2xx or not
	unreachable                // dial, TLS, reset or timeout
	refused                    // the address guard refused the connection
)

// Publish POSTs every event of the batch to its endpoint; see the package
// documentation for order, results and errors. It returns nil only when
// every event was answered with a 2xx.
func (p *Publisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("heraldwebhook: not published: %w", err)
	}
	outcomes := make([]outcome, len(batch))
	rounds := 0
	errs := herald.SendInRounds(ctx, batch, 1, func(ctx context.Context, round []int, errs []error) error {
		rounds++
		p.sendRound(ctx, batch, round, errs, outcomes)
		// A request that failed fails its event alone: there is no
		// connection whose loss would end the batch.
		return nil
	})

	confirmed, requests, unreachables := 0, 0, 0
	var firstUnreachable error
	for i, err := range errs {
		switch {
		case err == nil:
			confirmed++
		case outcomes[i] == unreachable && firstUnreachable == nil:
			firstUnreachable = err
		}
		if outcomes[i] != notSent {
			requests++
		}
		if outcomes[i] == unreachable {
			unreachables++
		}
	}
	if confirmed == len(batch) {
		p.log.Debug("published batch", "batch_size", len(batch), "rounds", rounds)
		return nil
	}
	if confirmed == 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("heraldwebhook: not published: %w", err)
		}
		if requests > 0 && unreachables == requests {
			// Every request failed before an answer: the endpoints are
			// down, so the relay should back off without spending the
			// events' attempts. A refusal of the address guard is no
			// outage: it lasts until the configuration changes, so its
			// events spend attempts and end in the dead letters.
			return fmt.Errorf("heraldwebhook: no endpoint reachable (%d requests failed): %w", requests, firstUnreachable)
		}
	}
	p.log.Debug("published batch with failures", "batch_size", len(batch), "confirmed", confirmed)
	return herald.BatchResult(errs)
}

// sendRound POSTs the events of batch at idx, up to MaxConcurrency at once,
// and returns once every one has its result in errs and outcomes. Each
// entry is written by the one worker that took its index, and read only
// after the workers are done.
func (p *Publisher) sendRound(ctx context.Context, batch []herald.Envelope, idx []int, errs []error, outcomes []outcome) {
	work := make(chan int, len(idx))
	for _, i := range idx {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for range min(p.maxConc, len(idx)) {
		wg.Go(func() {
			for i := range work {
				outcomes[i], errs[i] = p.send(ctx, &batch[i])
			}
		})
	}
	wg.Wait()
}

// errRequestTimeout is the cause of a request's context when Timeout ran
// out, to tell it from the caller's deadline.
var errRequestTimeout = errors.New("request timeout")

// send POSTs one event.
func (p *Publisher) send(ctx context.Context, env *herald.Envelope) (outcome, error) {
	ep := p.endpoints[env.Topic]
	if ep == nil {
		ep = p.def
	}
	if ep == nil {
		return notSent, herald.Permanent(fmt.Errorf("heraldwebhook: no endpoint for topic %q (set Config.Endpoints or Config.Default)", env.Topic))
	}
	header, body, err := p.request(env)
	if err != nil {
		return notSent, herald.Permanent(err)
	}

	reqCtx, cancel := context.WithTimeoutCause(ctx, p.timeout, errRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		// Not reached with a URL New validated; the error would quote it.
		return notSent, fmt.Errorf("heraldwebhook: building the request to %s failed", ep.origin)
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	header.Set(HeaderWebhookID, env.ID)
	header.Set(HeaderWebhookTimestamp, ts)
	header.Set(HeaderWebhookSignature, signature(ep.keys, env.ID, ts, body))
	req.Header = header

	resp, err := p.client.Do(req)
	if err != nil {
		// *url.Error repeats the full URL: keep only what went wrong.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		var guarded *RefusedDestinationError
		switch {
		case ctx.Err() != nil:
			return notSent, fmt.Errorf("heraldwebhook: POST to %s (topic %q) abandoned: %w", ep.origin, env.Topic, ctx.Err())
		case errors.As(err, &guarded):
			// Swap, not Load then Store: of concurrent refusals, one logs.
			if ep.refused.Swap(guarded) == nil {
				p.log.Warn("address guard refused an endpoint's address", "endpoint", ep.origin, "field", ep.field, "error", guarded.detail())
			}
			return refused, fmt.Errorf("heraldwebhook: POST to %s (topic %q): %w", ep.origin, env.Topic, err)
		case errors.Is(context.Cause(reqCtx), errRequestTimeout):
			return unreachable, fmt.Errorf("heraldwebhook: POST to %s (topic %q): no answer within %s: %w", ep.origin, env.Topic, p.timeout, err)
		}
		return unreachable, fmt.Errorf("heraldwebhook: POST to %s (topic %q): %w", ep.origin, env.Topic, err)
	}
	if ep.refused.Load() != nil {
		ep.refused.Store(nil)
	}
	// Drain a little of the answer so the connection can be reused; a
	// receiver that answers with more is cut off by Close.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()

	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return answered, nil
	}
	se := &StatusError{StatusCode: resp.StatusCode, Endpoint: ep.origin, Topic: env.Topic}
	if !retryableStatus(resp.StatusCode) {
		return answered, herald.Permanent(se)
	}
	se.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	return answered, se
}

// httpOnly reports whether a request must not carry a producer header of
// this name, although a Writer accepts it: Expect makes the client wait
// for a 100 Continue, Proxy-* speak to a proxy on the way, and User-Agent
// is the publisher's.
func httpOnly(name string) bool {
	return strings.EqualFold(name, "Expect") || strings.EqualFold(name, "User-Agent") ||
		len(name) >= 6 && strings.EqualFold(name[:6], "proxy-")
}

// request returns the request headers and body of env, without the
// webhook-* signing headers.
func (p *Publisher) request(env *herald.Envelope) (http.Header, []byte, error) {
	if p.ce == nil {
		h, err := p.header(env, herald.EventHeaders)
		if err != nil {
			return nil, nil, err
		}
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "application/json")
		}
		return h, env.Payload, nil
	}
	h, err := p.header(env, heraldce.ProducerHeaders)
	if err != nil {
		return nil, nil, err
	}
	if p.ce.ModeOr(heraldce.Binary) == heraldce.Structured {
		h.Set("Content-Type", heraldce.StructuredContentType)
		return h, p.ce.Structured(env), nil
	}
	p.ce.HTTPBinary(env, func(name, value string) { h.Set(name, value) })
	return h, env.Payload, nil
}

// header returns the headers that headers maps from env, less the names
// only HTTP acts on. A value that cannot be sent (a control character)
// fails the event: the row was not written through a Writer, which refuses
// it.
func (p *Publisher) header(env *herald.Envelope, headers func(*herald.Envelope, func(name, value string))) (http.Header, error) {
	for name := range env.Headers {
		if herald.ValidateHeaderName(name) != nil || httpOnly(name) {
			p.log.Debug("dropped a reserved producer header", "event_id", env.ID, "header", name)
		}
	}
	h := make(http.Header, len(env.Headers)+10)
	var err error
	headers(env, func(name, value string) {
		switch {
		case httpOnly(name):
		case !validHeaderValue(value):
			if err == nil {
				err = fmt.Errorf("heraldwebhook: event %s: header %q: the value contains a control character", env.ID, name)
			}
		default:
			h[http.CanonicalHeaderKey(name)] = []string{value}
		}
	})
	if err != nil {
		return nil, err
	}
	h.Set("User-Agent", p.userAgent)
	return h, nil
}

// validHeaderValue refuses the control characters net/http refuses (all
// but tab); bytes of 0x80 and up are allowed, as UTF-8 text.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
