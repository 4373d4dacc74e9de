package main

import (
	"context"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/heraldroute"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// endpoint is a destination as the command line gave it: a name and the
// URL (or comma-separated URLs) whose scheme picks the publisher.
type endpoint struct {
	name    string
	kind    string // nats, kafka, redis, ...: the publisher
	raw     string // as given; may hold a password
	display string // without secrets
	hosts   []string
	ce      *heraldce.Config // --cloudevents-source and --cloudevents-mode; nil: off
	// publisher: given by --publisher, whose secrets are HERALD_<KIND>_*
	// (destination_secrets.go).
	publisher bool
	// spec is the destination as the library parsed it (destination_spec.go).
	spec *heraldspec.Parsed
}

// schemes maps a URL scheme to the publisher it selects.
var schemes = map[string]string{
	"nats": "nats", "tls": "nats", "ws": "nats", "wss": "nats",
	"kafka": "kafka",
	"redis": "redis", "rediss": "redis",
	"amqp": "amqp", "amqps": "amqp",
	"mqtt": "mqtt", "mqtts": "mqtt",
	"http": "webhook", "https": "webhook",
	"sqs": "sqs", "sns": "sns",
	"pubsub": "pubsub",
}

// supportedSchemes is said in errors.
const supportedSchemes = "nats://, kafka://, redis://, amqp://, mqtt(s):// or http(s)://, or AWS's sqs:// or sns://, or Google Cloud's pubsub://"

var destinationName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)

// parseEndpoint checks one destination's URL list. Errors never repeat a
// secret: every password and token is registered with the redactor first.
func parseEndpoint(inv *invocation, label, name, raw string) (endpoint, error) {
	ep := endpoint{name: name, raw: strings.TrimSpace(raw), publisher: label == inv.flags.label("publisher")}
	if ep.raw == "" {
		return ep, usagef("%s: no URL", label)
	}
	// The publisher's package parses the URLs (heraldspec); a scheme no
	// package registered is refused there, with the schemes to use.
	kind, _ := specKind(ep.raw)
	return parseSpec(inv, label, ep, kind)
}

// destinationFlags are the flags that name destinations and route topics.
type destinationFlags struct {
	destinations, routes, debeziumRoutes *[]string
	defaultDest                          *string
	ceSource, ceMode                     *string
}

func addDestinationFlags(f *flagSet) destinationFlags {
	return destinationFlags{
		destinations: f.List("destination", "a named destination `NAME=URL` ("+supportedSchemes+"); repeat for several"),
		routes:       f.List("route", "send the topics matching `TOPIC=NAME` (exact, or a pattern with * and a final >) to a destination; repeat"),
		debeziumRoutes: f.List("debezium-route", "like --route `TOPIC=NAME`, with Debezium's outbox shape: "+
			"topic outbox.event.<aggregate_type>, key = aggregate id, id and type headers"),
		defaultDest: f.String("default-destination", "", "the destination `NAME` of topics no route matches; with --publisher, that one"),
		ceSource:    f.String("cloudevents-source", "", "send every event as a CloudEvent with this source `URI-reference`; off when empty"),
		ceMode: f.String("cloudevents-mode", "", "CloudEvents content `mode`: binary (attributes in headers) or structured (a JSON event); "+
			"default binary, structured on NATS, SQS and SNS"),
	}
}

// cloudEventsKinds are the destinations that send CloudEvents, and
// cloudEventsStructuredOnly those of them without a binary mode: NATS,
// whose binding has none, and SQS and SNS, which have no binding and too
// few message attributes.
var (
	cloudEventsKinds          = []string{"webhook", "kafka", "nats", "redis", "amqp", "mqtt", "sqs", "sns", "pubsub"}
	cloudEventsStructuredOnly = map[string]string{"nats": "NATS", "sqs": "SQS", "sns": "SNS"}
)

// cloudEvents checks --cloudevents-source and --cloudevents-mode, and that
// every destination can send CloudEvents: an option no destination can
// honour is refused, never ignored.
func (df destinationFlags) cloudEvents(inv *invocation, endpoints []endpoint) (*heraldce.Config, error) {
	source, mode := strings.TrimSpace(*df.ceSource), strings.TrimSpace(*df.ceMode)
	if source == "" {
		if mode != "" {
			return nil, usagef("%s goes with %s", inv.flags.label("cloudevents-mode"), inv.flags.label("cloudevents-source"))
		}
		return nil, nil
	}
	ce := &heraldce.Config{Source: source, Mode: heraldce.Mode(mode)}
	if err := ce.Validate("ce"); err != nil {
		return nil, usagef("%s", strings.NewReplacer(
			"ce.Source", inv.flags.label("cloudevents-source"),
			"ce.Mode", inv.flags.label("cloudevents-mode")).Replace(err.Error()))
	}
	for _, ep := range endpoints {
		switch {
		case !slices.Contains(cloudEventsKinds, ep.kind):
			return nil, usagef("%s: destination %s (%s) does not send CloudEvents yet: %s destinations do",
				inv.flags.label("cloudevents-source"), ep.name, ep.kind, strings.Join(cloudEventsKinds, ", "))
		case cloudEventsStructuredOnly[ep.kind] != "" && ce.Mode == heraldce.Binary:
			return nil, usagef("%s: destination %s is %s, which takes CloudEvents in structured mode only",
				inv.flags.label("cloudevents-mode"), ep.name, cloudEventsStructuredOnly[ep.kind])
		}
	}
	return ce, nil
}

// plan is the destinations and routes a relay publishes through.
type plan struct {
	endpoints []endpoint
	routes    []heraldroute.Route
	def       string
	// timed, when set, wraps each destination's publisher to time its
	// calls (herald_destination_publish_seconds).
	timed func(name string, p herald.Publisher) herald.Publisher
	// slots, when set, is each routed destination's publish calls at
	// once: with several databases, --max-in-flight for each of them.
	slots int
}

// parsePlan checks --publisher, --destination, the routes and the default.
func (df destinationFlags) parsePlan(inv *invocation, publisher string) (*plan, error) {
	p := &plan{}
	names := map[string]bool{}
	if strings.TrimSpace(publisher) != "" {
		ep, err := parseEndpoint(inv, inv.flags.label("publisher"), "default", publisher)
		if err != nil {
			return nil, err
		}
		p.endpoints, names["default"] = append(p.endpoints, ep), true
		p.def = "default"
	}
	for _, d := range *df.destinations {
		label := inv.flags.label("destination")
		name, raw, ok := strings.Cut(d, "=")
		if !ok {
			inv.stderr.add(userinfoSecrets(d, true)...)
			return nil, usagef("%s: %q is not NAME=URL", label, inv.stderr.scrub(clean(d)))
		}
		if !destinationName.MatchString(name) {
			return nil, usagef("%s: name %q must match %s", label, clean(name), destinationName)
		}
		if names[name] {
			return nil, usagef("%s: destination %q is given twice", label, name)
		}
		ep, err := parseEndpoint(inv, label+" "+name, name, raw)
		if err != nil {
			return nil, err
		}
		p.endpoints, names[name] = append(p.endpoints, ep), true
	}
	if err := checkSecretNames(inv, p.endpoints); err != nil {
		return nil, err
	}
	ce, err := df.cloudEvents(inv, p.endpoints)
	if err != nil {
		return nil, err
	}
	for i := range p.endpoints {
		p.endpoints[i].ce = ce
	}
	if len(p.endpoints) == 0 {
		return nil, usagef("--publisher (or HERALD_PUBLISHER) or --destination is required: a %s URL", supportedSchemes)
	}
	var routeFlags []string // the flag of each of p.routes, for errors
	for _, list := range []struct {
		flag     string
		entries  []string
		debezium bool
	}{{"route", *df.routes, false}, {"debezium-route", *df.debeziumRoutes, true}} {
		for _, r := range list.entries {
			label := inv.flags.label(list.flag)
			topic, name, ok := strings.Cut(r, "=")
			if !ok || strings.TrimSpace(topic) == "" {
				return nil, usagef("%s: %q is not TOPIC=NAME", label, clean(r))
			}
			if !names[name] {
				return nil, usagef("%s: %q routes to %q, which no --destination names", label, clean(r), clean(name))
			}
			p.routes = append(p.routes, heraldroute.Route{Topic: topic, Destination: name, Debezium: list.debezium})
			routeFlags = append(routeFlags, label)
		}
	}
	if d := *df.defaultDest; d != "" {
		if !names[d] {
			return nil, usagef("%s: %q is not a destination", inv.flags.label("default-destination"), clean(d))
		}
		p.def = d
	} else if len(p.endpoints) == 1 && p.def == "" {
		p.def = p.endpoints[0].name
	}
	// Topics, routes and patterns are checked by the router; its errors
	// name its Config, which the command line spells as flags.
	if _, err := p.router(nil, func(string) herald.Publisher { return herald.PublisherFunc(nil) }, nil); err != nil {
		msg := routeField.ReplaceAllStringFunc(strings.TrimPrefix(err.Error(), "heraldroute: "), func(m string) string {
			i, _ := strconv.Atoi(routeField.FindStringSubmatch(m)[1])
			if i >= len(routeFlags) {
				return "a route's topic"
			}
			return routeFlags[i]
		})
		return nil, usagef("%s", msg)
	}
	return p, nil
}

// routeField finds the route a router's error is about.
var routeField = regexp.MustCompile(`Config\.Routes\[(\d+)\]\.Topic`)

// direct reports whether the plan is one destination taking every topic
// as it is: no router needed.
func (p *plan) direct() bool {
	return len(p.endpoints) == 1 && len(p.routes) == 0 && p.def == p.endpoints[0].name
}

func (p *plan) router(log *slog.Logger, pub func(name string) herald.Publisher, timeout *time.Duration) (*heraldroute.Router, error) {
	cfg := &heraldroute.Config{Routes: p.routes, Default: p.def, Logger: log}
	for _, ep := range p.endpoints {
		d := heraldroute.Destination{Name: ep.name, Publisher: pub(ep.name), MaxInFlight: p.slots}
		if timeout != nil {
			d.Timeout = *timeout
		}
		cfg.Destinations = append(cfg.Destinations, d)
	}
	return heraldroute.New(cfg)
}

func (p *plan) display() string {
	var parts []string
	for _, ep := range p.endpoints {
		parts = append(parts, ep.name+"="+ep.display)
	}
	return strings.Join(parts, " ")
}

// destinations are a relay's opened destinations.
type destinations struct {
	pub      herald.Publisher // what the relay publishes through
	byName   map[string]herald.Publisher
	router   *heraldroute.Router // nil for one destination taking every topic
	names    []string
	webhooks map[string]*heraldwebhook.Publisher // by destination name
	closers  []func()
}

// close closes the destinations' connections.
func (d *destinations) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// refused says which webhook destinations the address guard refused on
// their last request, "" when none.
func (d *destinations) refused() string {
	var out []string
	for _, name := range d.names {
		if pub := d.webhooks[name]; pub != nil {
			if err := pub.Refused(); err != nil {
				out = append(out, "destination "+name+": "+webhookHints.Replace(err.Error()))
			}
		}
	}
	return strings.Join(out, "; ")
}

// connect opens every destination, waiting for each that cannot be
// reached yet, and returns them.
func (p *plan) connect(ctx context.Context, start starter, log *slog.Logger, owner string,
	natsCfg *heraldnats.Config, publishTimeout time.Duration) (*destinations, error) {
	pubs := map[string]herald.Publisher{}
	d := &destinations{webhooks: map[string]*heraldwebhook.Publisher{}, byName: pubs}
	for _, ep := range p.endpoints {
		var (
			pub    herald.Publisher
			closer func()
		)
		err := start.wait(ctx, "destination "+ep.name, func(ctx context.Context) (err error) {
			pub, closer, err = openEndpoint(ctx, start.inv, log, owner, ep, natsCfg)
			return err
		})
		if err != nil {
			d.close()
			return nil, err
		}
		d.closers = append(d.closers, closer)
		d.names = append(d.names, ep.name)
		pubs[ep.name] = pub
		if wh, ok := pub.(*heraldwebhook.Publisher); ok {
			d.webhooks[ep.name] = wh
		}
		if p.timed != nil {
			pubs[ep.name] = p.timed(ep.name, pub)
		}
	}
	if p.direct() {
		d.pub = pubs[p.endpoints[0].name]
		return d, nil
	}
	// A destination's call ends before the relay's publish timeout, so that
	// a slow one is cut off and its breaker learns of it.
	timeout := publishTimeout * 3 / 4
	r, err := p.router(log, func(name string) herald.Publisher { return pubs[name] }, &timeout)
	if err != nil {
		d.close()
		return nil, err
	}
	d.pub, d.router = r, r
	return d, nil
}

// webhookHints rewords the webhook publisher's refusals (Refused) for the
// daemon, which has one endpoint per destination.
var webhookHints = strings.NewReplacer(" (Config.Default)", "")

// The webhook destinations' settings from the environment: the Standard
// Webhooks signing secret (whsec_...), and the networks (CIDRs) a webhook
// may reach although private or loopback.
const (
	webhookSecretEnv         = "HERALD_WEBHOOK_SECRET"
	webhookPreviousSecretEnv = "HERALD_WEBHOOK_PREVIOUS_SECRET"
	webhookAllowEnv          = "HERALD_WEBHOOK_ALLOW_NETWORKS"
)

// brokerConnectTimeout bounds reaching a broker at start.
const brokerConnectTimeout = 5 * time.Second

func openEndpoint(ctx context.Context, inv *invocation, log *slog.Logger, owner string, ep endpoint,
	natsCfg *heraldnats.Config) (herald.Publisher, func(), error) {
	return openSpec(ctx, inv, log, owner, ep, natsCfg)
}

const pubsubEmulatorEnv = "PUBSUB_EMULATOR_HOST"
