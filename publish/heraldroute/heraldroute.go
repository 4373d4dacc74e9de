// Package heraldroute sends each event to the destination its topic routes
// to, and keeps destinations apart: one that is down or slow does not stall
// the events bound for the others.
//
// A Router is a herald.Publisher over several named destinations, each a
// herald.Publisher of its own (NATS, Kafka, RabbitMQ, Redis, webhooks).
// Routes map topics to destinations by exact name or by pattern; the first
// match wins, exact names before patterns, and unmatched topics go to the
// default destination. A route may also reshape events the way Debezium's
// outbox event router does (topic outbox.event.<aggregate_type>, key =
// aggregate id, id and type headers), so that consumers written for
// Debezium read Herald's events unchanged.
//
// Each destination gets its part of a batch in batch order, every event
// with its Envelope.Ordered mark, and the router returns the destination's
// per-event results as they are: a destination holds back what follows a
// failed ordered event of its key exactly as it would alone. The router
// runs the publisher conformance suite (publish/publishertest) over two
// webhook destinations.
//
// Isolation, per destination:
//   - a concurrency limit: when a destination already has MaxInFlight
//     batches publishing, its events in a new batch fail at once with an
//     error marked herald.Unavailable instead of waiting for a slot, so a
//     slow destination never holds up a batch for the others;
//   - a timeout per call, shorter than the relay's;
//   - a circuit breaker: after FailureThreshold failed calls in a row (the
//     destination unreachable, or too slow), it opens for OpenFor, and its
//     events fail at once, marked herald.Unavailable, with a RetryAfter of
//     the time left; then one call probes it (half-open) and success
//     closes it. Every change of state is logged.
//
// Events failed as Unavailable keep their attempts, and the relay keeps
// claiming for the other destinations. When every destination is down,
// Publish returns an ordinary error instead, which the relay takes as an
// outage and pauses for.
package heraldroute

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/herald-outbox/herald"
)

// Destination is one place events go.
type Destination struct {
	// Name identifies the destination in routes, logs and Status.
	Name string
	// Publisher delivers the destination's events.
	Publisher herald.Publisher
	// MaxInFlight is how many Publish calls may run at once. Defaults to 4.
	MaxInFlight int
	// Timeout bounds one Publish call. Defaults to 10s.
	Timeout time.Duration
	// FailureThreshold is how many failed calls in a row open the breaker.
	// Defaults to 3.
	FailureThreshold int
	// OpenFor is how long an open breaker fails calls before letting one
	// through. Defaults to 5s.
	OpenFor time.Duration
}

// Route sends the topics it matches to a destination.
type Route struct {
	// Topic is an exact topic name, or a pattern where * matches any run
	// of characters other than a dot (orders.* matches orders.placed) and a
	// trailing > matches the rest (orders.> matches orders.eu.placed).
	Topic string
	// Destination names a Destination.
	Destination string
	// Debezium reshapes the events as Debezium's outbox event router
	// does: topic outbox.event.<aggregate_type>, key = aggregate id, and
	// headers id (the event id) and type (the event type).
	Debezium bool
}

// Config configures a Router.
type Config struct {
	Destinations []Destination
	// Routes are tried in order, exact topics before patterns.
	Routes []Route
	// Default names the destination of topics no route matches. Defaults
	// to "": such events fail (and are retried) with an error saying no
	// route matches, logged once a minute per topic.
	Default string
	// Logger receives state changes. Defaults to slog.Default().
	Logger *slog.Logger
}

// Router is a herald.Publisher that routes events to destinations.
type Router struct {
	dests    map[string]*destination
	order    []*destination // in configuration order, for Status
	exact    map[string]Route
	globs    []Route
	def      *destination
	log      *slog.Logger
	now      func() time.Time
	unrouted sync.Map // topic -> time last logged as unrouted
}

var _ herald.Publisher = (*Router)(nil)

// New checks cfg and returns a Router.
func New(cfg *Config) (*Router, error) {
	if cfg == nil || len(cfg.Destinations) == 0 {
		return nil, errors.New("heraldroute: Config.Destinations must name at least one destination")
	}
	r := &Router{dests: map[string]*destination{}, exact: map[string]Route{}, log: cfg.Logger, now: time.Now}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.log = r.log.With("component", "herald.route")
	for i, d := range cfg.Destinations {
		field := fmt.Sprintf("heraldroute: Config.Destinations[%d]", i)
		switch {
		case strings.TrimSpace(d.Name) == "":
			return nil, fmt.Errorf("%s.Name is required", field)
		case r.dests[d.Name] != nil:
			return nil, fmt.Errorf("%s.Name %q is used twice", field, d.Name)
		case d.Publisher == nil:
			return nil, fmt.Errorf("%s.Publisher is required", field)
		case d.MaxInFlight < 0 || d.Timeout < 0 || d.FailureThreshold < 0 || d.OpenFor < 0:
			return nil, fmt.Errorf("%s: MaxInFlight, Timeout, FailureThreshold and OpenFor must not be negative", field)
		}
		dst := newDestination(d, r.log)
		r.dests[d.Name] = dst
		r.order = append(r.order, dst)
	}
	for i, rt := range cfg.Routes {
		field := fmt.Sprintf("heraldroute: Config.Routes[%d]", i)
		if r.dests[rt.Destination] == nil {
			return nil, fmt.Errorf("%s.Destination %q is not a destination", field, rt.Destination)
		}
		if err := checkPattern(rt.Topic); err != nil {
			return nil, fmt.Errorf("%s.Topic: %w", field, err)
		}
		if strings.ContainsAny(rt.Topic, "*>") {
			r.globs = append(r.globs, rt)
		} else if _, dup := r.exact[rt.Topic]; !dup {
			r.exact[rt.Topic] = rt
		}
	}
	if cfg.Default != "" {
		if r.def = r.dests[cfg.Default]; r.def == nil {
			return nil, fmt.Errorf("heraldroute: Config.Default %q is not a destination", cfg.Default)
		}
	}
	return r, nil
}

func checkPattern(p string) error {
	switch {
	case strings.TrimSpace(p) == "":
		return errors.New("is empty")
	case strings.Contains(p, ">") && !strings.HasSuffix(p, ">"):
		return fmt.Errorf("%q: > may only end a pattern", p)
	case strings.HasSuffix(p, ">") && p != ">" && !strings.HasSuffix(p, ".>"):
		// "orders>" would never match: > stands for whole tokens.
		return fmt.Errorf("%q: > must be a token of its own, as in orders.>", p)
	}
	if _, err := path.Match(tokens(p), ""); err != nil {
		return fmt.Errorf("%q: %w", p, err)
	}
	return nil
}

// tokens turns a topic or a pattern into a path for path.Match, whose
// separator is '/': dots become slashes, and slashes, which are ordinary
// characters of a topic, become dots, so that * never matches across a
// dot and always matches a slash (orders.* does not match orders/eu, ord*
// matches ord/ers).
var tokens = strings.NewReplacer(".", "/", "/", ".").Replace

// route returns the route for topic, and false when none matches and there
// is no default.
func (r *Router) route(topic string) (Route, *destination, bool) {
	if rt, ok := r.exact[topic]; ok {
		return rt, r.dests[rt.Destination], true
	}
	for _, rt := range r.globs {
		if matches(rt.Topic, topic) {
			return rt, r.dests[rt.Destination], true
		}
	}
	if r.def != nil {
		return Route{Destination: r.def.name}, r.def, true
	}
	return Route{}, nil, false
}

// DestinationOf names the destination the events of topic go to: its
// route's, or the default's; "" when none. Metrics label events with it,
// and the herald daemon gives it to the relay (herald.RelayConfig.DestinationOf),
// so that pausing a destination holds every topic routed to it.
func (r *Router) DestinationOf(topic string) string {
	if _, d, ok := r.route(topic); ok {
		return d.name
	}
	return ""
}

// matches applies a pattern: dots separate tokens, * matches within one
// token, a trailing > matches one or more tokens.
func matches(pattern, topic string) bool {
	if prefix, ok := strings.CutSuffix(pattern, ">"); ok {
		if !strings.HasSuffix(prefix, ".") && prefix != "" {
			return false
		}
		n := strings.Count(prefix, ".")
		parts := strings.SplitN(topic, ".", n+1)
		if len(parts) <= n {
			return false
		}
		head := strings.Join(parts[:n], ".")
		if n > 0 {
			head += "."
		}
		ok, _ := path.Match(tokens(prefix), tokens(head))
		return ok && parts[n] != ""
	}
	ok, _ := path.Match(tokens(pattern), tokens(topic))
	return ok
}

// Publish implements herald.Publisher: it splits the batch by destination,
// keeping each key's order, publishes the parts at once and merges the
// results.
func (r *Router) Publish(ctx context.Context, batch []herald.Envelope) error {
	if len(batch) == 0 {
		return nil
	}
	errs := make([]error, len(batch))
	parts := map[*destination]*part{}
	var order []*part
	for i, env := range batch {
		rt, dst, ok := r.route(env.Topic)
		if !ok {
			errs[i] = r.noRoute(env.Topic)
			continue
		}
		p := parts[dst]
		if p == nil {
			p = &part{dst: dst}
			parts[dst] = p
			order = append(order, p)
		}
		if rt.Debezium {
			env = debezium(env)
		}
		p.idx = append(p.idx, i)
		p.envs = append(p.envs, env)
	}

	var wg sync.WaitGroup
	for _, p := range order {
		wg.Go(func() { p.errs = p.dst.publish(ctx, p.envs) })
	}
	wg.Wait()

	unavailable := 0
	for _, p := range order {
		for j, i := range p.idx {
			errs[i] = p.errs[j]
			if herald.IsUnavailable(p.errs[j]) {
				unavailable++
			}
		}
	}
	if unavailable == len(batch) && r.allDown() {
		// Nothing can go anywhere: an outage, which the relay pauses for.
		// While some destination is up, the relay must keep claiming for it.
		return fmt.Errorf("heraldroute: every destination is unavailable: %w", firstError(errs))
	}
	for _, err := range errs {
		if err != nil {
			return &herald.BatchError{Errs: errs}
		}
	}
	return nil
}

type part struct {
	dst  *destination
	idx  []int // positions in the batch
	envs []herald.Envelope
	errs []error
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// noRoute is the error of an event whose topic matches no route, logged
// once a minute per topic.
func (r *Router) noRoute(topic string) error {
	now := r.now()
	if last, ok := r.unrouted.Load(topic); !ok || now.Sub(last.(time.Time)) > time.Minute {
		r.unrouted.Store(topic, now)
		r.log.Warn("no route matches topic; its events wait until one does", "topic", topic)
	}
	return fmt.Errorf("heraldroute: no route matches topic %q and there is no default destination", topic)
}

// debezium reshapes env as Debezium's outbox event router would publish it.
func debezium(env herald.Envelope) herald.Envelope {
	if env.AggregateType != "" {
		env.Topic = "outbox.event." + env.AggregateType
	}
	env.Key = env.AggregateID
	h := make(map[string]string, len(env.Headers)+2)
	for k, v := range env.Headers {
		h[k] = v
	}
	h["id"] = env.ID
	if env.Type != "" {
		h["type"] = env.Type
	}
	env.Headers = h
	return env
}

// allDown reports whether no destination's breaker is closed.
func (r *Router) allDown() bool {
	for _, d := range r.order {
		if d.status().Breaker == breakerClosed {
			return false
		}
	}
	return true
}

// DestinationStatus is a destination's state, for operators.
type DestinationStatus struct {
	Name     string
	Breaker  string // closed, open or half-open
	InFlight int    // Publish calls running
	Failures int    // failed calls in a row
	// LastError is the error of the destination's last failed call
	// (unreachable or too slow, not an event's own refusal), scrubbed of
	// secrets, and LastErrorAt when it failed; kept after it recovers.
	LastError   string
	LastErrorAt time.Time
}

// Status returns every destination's state, in configuration order.
func (r *Router) Status() []DestinationStatus {
	out := make([]DestinationStatus, 0, len(r.order))
	for _, d := range r.order {
		out = append(out, d.status())
	}
	return out
}
