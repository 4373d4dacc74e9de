package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	"github.com/aws/smithy-go"
	"github.com/eclipse/paho.golang/autopaho"
	"github.com/nats-io/nats.go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/heraldmqtt"
	"github.com/herald-outbox/herald/publish/heraldnats"
	"github.com/herald-outbox/herald/publish/heraldpubsub"
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
	if kind, ok := specKind(ep.raw); ok {
		return parseSpec(inv, label, ep, kind)
	}
	var shown []string
	for _, one := range strings.Split(ep.raw, ",") {
		one = strings.TrimSpace(one)
		userIsSecret := urlUserIsSecret(inv, ep, one)
		inv.stderr.add(userinfoSecrets(one, userIsSecret)...)
		u, err := url.Parse(one)
		if err != nil {
			// The error quotes the URL, or a piece of it that may be part
			// of a password the redactor cannot find (the "port" of
			// nats://u:pa/ss@host, the rest after a '#'): give the reason
			// only, and only when it quotes nothing.
			reason := "not a URL"
			var ue *url.Error
			if errors.As(err, &ue) && !strings.Contains(ue.Err.Error(), `"`) {
				reason += ": " + ue.Err.Error()
			}
			return ep, usagef("%s: %s", label, reason)
		}
		inv.stderr.add(urlUserSecrets(u, userIsSecret)...)
		if ambiguousUserinfo(one, u) {
			return ep, usagef("%s: the user information holds an '@', '/', '?' or '#' that is not percent-encoded (write '@' as %%40, '/' as %%2F)", label)
		}
		scheme := strings.ToLower(u.Scheme)
		kind, ok := schemes[scheme]
		switch {
		case scheme == "":
			return ep, usagef("%s: %s has no scheme: use %s", label, inv.stderr.scrub(redactURL(u, true)), supportedSchemes)
		case !ok:
			return ep, usagef("%s: scheme %q is not supported: use %s", label, u.Scheme, supportedSchemes)
		case ep.kind != "" && ep.kind != kind:
			return ep, usagef("%s: one destination takes URLs of one broker; give another --destination for %s", label, scheme)
		case u.Hostname() == "":
			return ep, usagef("%s: %s has no host", label, inv.stderr.scrub(redactURL(u, true)))
		}
		if p := u.Port(); p != "" {
			var n int
			if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n < 1 || n > 65535 {
				return ep, usagef("%s: port %q is not a port number", label, p)
			}
		}
		if kind == "sqs" || kind == "sns" {
			if _, err := parseAWSDestination(kind, u); err != nil {
				return ep, usagef("%s: %v", label, err)
			}
		}
		if kind == "pubsub" {
			emulator, _ := inv.getenv(pubsubEmulatorEnv)
			if _, err := parsePubSub(label, u, emulator); err != nil {
				return ep, err
			}
		}
		if kind == "mqtt" {
			if _, _, err := mqttDestination(label, u); err != nil {
				return ep, err
			}
		}
		// Options, TLS files and passwords are checked here, before the
		// relay waits for its database.
		if e := ep; kind == "amqp" {
			e.kind = kind
			if _, err := amqpDestination(inv, label, e, u); err != nil {
				return ep, err
			}
		}
		ep.kind = kind
		ep.hosts = append(ep.hosts, u.Host)
		if kind == "webhook" {
			// A webhook URL's path or query is often its credential
			// (hooks.example.com/services/T0/B0/XXXX): show the origin
			// only, as the webhook publisher does.
			shown = append(shown, u.Scheme+"://"+u.Host)
			continue
		}
		shown = append(shown, redactURL(u, userIsSecret))
	}
	if ep.kind != "nats" && ep.kind != "kafka" && len(ep.hosts) > 1 {
		return ep, usagef("%s: a %s destination takes one URL", label, ep.kind)
	}
	// Authentication and TLS options (auth_kafka.go).
	switch ep.kind {
	case "kafka":
		if _, err := kafkaDestination(inv, label, ep); err != nil {
			return ep, err
		}
	}
	ep.display = strings.Join(shown, ",")
	return ep, nil
}

// ambiguousUserinfo reports whether u, parsed from raw, took another
// password (or token) than the redactor found in raw, which ends the user
// information at its last '@': an '@', '/', '?' or '#' that is not
// percent-encoded moved the end of it (user:p@ss/x@host parses with the
// host "ss"), and the rest of the password would show as the host or the
// path, which are printed.
func ambiguousUserinfo(raw string, u *url.URL) bool {
	if u.User == nil {
		return false
	}
	found := userinfoSecrets(raw, true)
	if len(found) != 1 {
		return true
	}
	secret, err := url.PathUnescape(found[0])
	return err != nil || secret != urlSecrets(u)[0]
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
	for _, ep := range p.endpoints {
		if ep.kind == "webhook" {
			pub, err := newWebhook(inv, slog.New(slog.DiscardHandler), ep)
			if err != nil {
				return nil, err
			}
			_ = pub.Close()
		}
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

// newWebhook builds a webhook destination's publisher; it connects to
// nothing, so parsePlan uses it to check the configuration early.
func newWebhook(inv *invocation, log *slog.Logger, ep endpoint) (*heraldwebhook.Publisher, error) {
	// The signing secrets come from the environment only, never from a
	// flag that would show in the process list.
	sign, err := webhookSecrets(inv, ep)
	if err != nil {
		return nil, err
	}
	allowed, err := inv.env(webhookAllowEnv)
	if err != nil {
		return nil, err
	}
	def := sign.own
	def.URL = ep.raw
	pub, err := heraldwebhook.New(&heraldwebhook.Config{
		Default: def, Secret: sign.def, PreviousSecret: sign.prev,
		AllowedNetworks: strings.Fields(strings.ReplaceAll(allowed, ",", " ")), Logger: log,
		AllowHint:   webhookAllowEnv + " (CIDRs, comma-separated)",
		CloudEvents: ep.ce,
	})
	if err != nil {
		msg := webhookNetworkField.ReplaceAllString(inv.stderr.scrub(err.Error()), webhookAllowEnv)
		return nil, usagef("destination %s: %s", ep.name, sign.hints.Replace(msg))
	}
	return pub, nil
}

// webhookHints rewords the webhook publisher's errors for the command line:
// its Config is the destination's URL and the environment.
var webhookHints = strings.NewReplacer(
	"heraldwebhook: Config.Default.URL: ", "",
	" (Config.Default)", "",
	"heraldwebhook: Config.Default.Secret is required, or set Config.Secret",
	webhookSecretEnv+" is required: the whsec_... secret every webhook request is signed with",
	"heraldwebhook: Config.Secret", webhookSecretEnv,
)

// webhookNetworkField is the webhook publisher's name for one entry of
// HERALD_WEBHOOK_ALLOW_NETWORKS.
var webhookNetworkField = regexp.MustCompile(`heraldwebhook: Config\.AllowedNetworks\[\d+\]`)

// The webhook destinations' settings from the environment: the Standard
// Webhooks signing secret (whsec_...), and the networks (CIDRs) a webhook
// may reach although private or loopback.
const (
	webhookSecretEnv = "HERALD_WEBHOOK_SECRET"
	webhookAllowEnv  = "HERALD_WEBHOOK_ALLOW_NETWORKS"
)

// brokerConnectTimeout bounds reaching a broker at start.
const brokerConnectTimeout = 5 * time.Second

func openEndpoint(ctx context.Context, inv *invocation, log *slog.Logger, owner string, ep endpoint,
	natsCfg *heraldnats.Config) (herald.Publisher, func(), error) {
	unreachable := func(err error) error {
		msg := inv.stderr.scrub(herald.Scrub(err.Error()))
		if refusedCredentials(err) {
			return fmt.Errorf("destination %s at %s refused the credentials: %s", ep.name, ep.display, msg)
		}
		return &unreachableError{fmt.Sprintf("cannot reach destination %s at %s: %s", ep.name, ep.display, msg)}
	}
	if ep.spec != nil {
		return openSpec(ctx, inv, log, owner, ep, natsCfg)
	}
	switch ep.kind {
	case "kafka":
		return openKafka(ctx, inv, log, ep, unreachable)
	case "amqp":
		return openAMQP(ctx, inv, log, owner, ep, unreachable)
	case "sqs", "sns":
		return openAWS(ctx, inv, log, ep)
	case "mqtt":
		return openMQTT(ctx, inv, log, ep, unreachable)
	case "pubsub":
		return openPubSub(ctx, inv, log, ep)
	case "webhook":
		// The signing secret comes from the environment only, never from a
		// flag that would show in the process list.
		pub, err := newWebhook(inv, log, ep)
		if err != nil {
			return nil, nil, err
		}
		return pub, func() { _ = pub.Close() }, nil
	}
	return nil, nil, errors.New("unknown destination kind " + ep.kind)
}

// refusedCredentials reports whether a broker answered that the
// credentials are wrong: configuration, not a broker to wait for.
func refusedCredentials(err error) bool {
	var amqpErr *amqp.Error
	return errors.Is(err, nats.ErrAuthorization) || redis.HasErrorPrefix(err, "WRONGPASS") ||
		redis.HasErrorPrefix(err, "NOAUTH") || (errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused) ||
		mqttRefusedCredentials(err)
}

// awsDestination is an sqs:// or sns:// destination:
//
//	sqs://QUEUE?region=R&account=ID&endpoint=URL&max_message_bytes=N
//	sqs://sqs.R.amazonaws.com/ID/QUEUE (a queue URL, https:// left out)
//	sns://TOPIC?region=R&account=ID&endpoint=URL&max_message_bytes=N
//
// Every option may be left out: the region then comes from the AWS
// configuration (AWS_REGION, the shared config file), the account is the
// caller's own, the endpoint AWS's. Credentials come from the AWS chain
// (the environment, the shared files, a role), never from the URL.
type awsDestination struct {
	kind     string // sqs or sns
	name     string // the queue's or topic's name
	region   string
	account  string
	endpoint string
	maxBytes int
	ce       *heraldce.Config // --cloudevents-*; nil: off
}

var (
	awsQueueName  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,75}(\.fifo)?$`)
	awsTopicName  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,251}(\.fifo)?$`)
	awsRegion     = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]+$`)
	awsAccount    = regexp.MustCompile(`^[0-9]{12}$`)
	awsQueueHost  = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)
	awsOptionList = "region, account, endpoint or max_message_bytes"
)

// parseAWSDestination checks an sqs:// or sns:// URL; errors quote nothing
// but option names and values, and never the URL's user information.
func parseAWSDestination(kind string, u *url.URL) (awsDestination, error) {
	d := awsDestination{kind: kind, name: u.Host}
	if u.User != nil {
		return d, errors.New("an " + kind + ":// URL takes no credentials: they come from the AWS credential chain " +
			"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, a role)")
	}
	path := strings.Trim(u.Path, "/")
	switch {
	case kind == "sqs" && path != "":
		// A queue URL: https://sqs.REGION.amazonaws.com/ACCOUNT/NAME.
		parts := strings.Split(path, "/")
		m := awsQueueHost.FindStringSubmatch(u.Hostname())
		if len(parts) != 2 || m == nil {
			return d, errors.New("an sqs:// URL is sqs://QUEUE?region=... or sqs://sqs.REGION.amazonaws.com/ACCOUNT/QUEUE")
		}
		d.region, d.account, d.name = m[1], parts[0], parts[1]
	case path != "":
		return d, errors.New("an sns:// URL is sns://TOPIC?region=...&account=...: no path")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return d, errors.New("the query is not name=value pairs")
	}
	for name, vs := range q {
		if len(vs) > 1 {
			return d, fmt.Errorf("option %q is given twice", clean(name))
		}
		v := vs[0]
		switch name {
		case "region":
			d.region = v
		case "account":
			d.account = v
		case "endpoint":
			d.endpoint = v
		case "max_message_bytes":
			if d.maxBytes, err = strconv.Atoi(v); err != nil || d.maxBytes < 1 || d.maxBytes > 1<<20 {
				return d, fmt.Errorf("max_message_bytes=%q is not a number of bytes from 1 to 1048576", clean(v))
			}
		default:
			return d, fmt.Errorf("%s option %q is not supported: use %s", kind, clean(name), awsOptionList)
		}
	}
	switch {
	case kind == "sqs" && !awsQueueName.MatchString(d.name):
		return d, fmt.Errorf("%q is not an SQS queue name (letters, digits, - and _, up to 80 characters with .fifo)", clean(d.name))
	case kind == "sns" && !awsTopicName.MatchString(d.name):
		return d, fmt.Errorf("%q is not an SNS topic name (letters, digits, - and _, up to 256 characters with .fifo)", clean(d.name))
	case d.region != "" && !awsRegion.MatchString(d.region):
		return d, fmt.Errorf("region=%q is not an AWS region such as eu-west-1", clean(d.region))
	case d.account != "" && !awsAccount.MatchString(d.account):
		return d, fmt.Errorf("account=%q is not a 12-digit AWS account id", clean(d.account))
	}
	if d.endpoint != "" {
		e, err := url.Parse(d.endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
			return d, errors.New("endpoint is not an http:// or https:// URL without credentials")
		}
	}
	return d, nil
}

// awsEnv are the variables of the AWS credential chain that the daemon
// reads through its own environment, so that its tests need not set the
// process's; the SDK reads the rest (AWS_CONFIG_FILE, web identity, ...).
const (
	awsAccessKeyEnv    = "AWS_ACCESS_KEY_ID"
	awsSecretKeyEnv    = "AWS_SECRET_ACCESS_KEY"
	awsSessionTokenEnv = "AWS_SESSION_TOKEN"
	awsRegionEnv       = "AWS_REGION"
	awsProfileEnv      = "AWS_PROFILE"
)

// openAWS builds an SQS or SNS publisher from the AWS configuration and
// checks that its queue or topic exists.
func openAWS(ctx context.Context, inv *invocation, log *slog.Logger, ep endpoint) (herald.Publisher, func(), error) {
	u, err := url.Parse(ep.raw)
	if err != nil {
		return nil, nil, usagef("destination %s: not a URL", ep.name)
	}
	d, err := parseAWSDestination(ep.kind, u)
	if err != nil {
		return nil, nil, usagef("destination %s: %v", ep.name, err)
	}
	d.ce = ep.ce
	cfg, err := loadAWSConfig(ctx, inv, log, d)
	if err != nil {
		return nil, nil, usagef("destination %s: %s", ep.name, inv.stderr.scrub(err.Error()))
	}
	if d.endpoint != "" {
		cfg.BaseEndpoint = aws.String(d.endpoint)
	}
	// A transport of its own, whose idle connections the closer closes.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	cfg.HTTPClient = &http.Client{Transport: transport}
	opened := false
	defer func() {
		if !opened {
			transport.CloseIdleConnections()
		}
	}()
	if cfg.Region == "" {
		return nil, nil, usagef("destination %s: no AWS region: add ?region= to the URL or set %s", ep.name, awsRegionEnv)
	}
	failed := func(what string, err error) error {
		msg := inv.stderr.scrub(herald.Scrub(err.Error()))
		var api smithy.APIError
		if errors.As(err, &api) && awsCredentialRefused(api.ErrorCode()) {
			return fmt.Errorf("destination %s at %s refused the credentials: %s", ep.name, ep.display, msg)
		}
		return &unreachableError{fmt.Sprintf("cannot %s for destination %s at %s: %s", what, ep.name, ep.display, msg)}
	}
	pctx, cancel := context.WithTimeout(ctx, brokerConnectTimeout)
	defer cancel()
	open := d.openSNS
	if d.kind == "sqs" {
		open = d.openSQS
	}
	pub, err := open(pctx, cfg, log, failed)
	if err != nil {
		return nil, nil, err
	}
	opened = true
	return pub, transport.CloseIdleConnections, nil
}

// openSQS finds the queue's URL and returns a publisher to it; failed
// describes an error of AWS.
func (d awsDestination) openSQS(ctx context.Context, cfg aws.Config, log *slog.Logger,
	failed func(string, error) error) (herald.Publisher, error) {
	client := sqs.NewFromConfig(cfg)
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(d.name)}
	if d.account != "" {
		in.QueueOwnerAWSAccountId = aws.String(d.account)
	}
	out, err := client.GetQueueUrl(ctx, in)
	if err != nil {
		return nil, failed("find queue "+d.name, err)
	}
	return heraldaws.NewSQS(client, &heraldaws.SQSConfig{
		QueueURL: heraldaws.Fixed(aws.ToString(out.QueueUrl)), MaxMessageBytes: d.maxBytes, Logger: log, CloudEvents: d.ce,
	})
}

// openSNS checks that the topic exists and returns a publisher to it. The
// account defaults to the caller's own.
func (d awsDestination) openSNS(ctx context.Context, cfg aws.Config, log *slog.Logger,
	failed func(string, error) error) (herald.Publisher, error) {
	account := d.account
	if account == "" {
		out, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
		if err != nil {
			return nil, failed("find the AWS account", err)
		}
		account = aws.ToString(out.Account)
	}
	arn := fmt.Sprintf("arn:%s:sns:%s:%s:%s", awsPartition(cfg.Region), cfg.Region, account, d.name)
	client := sns.NewFromConfig(cfg)
	if _, err := client.GetTopicAttributes(ctx, &sns.GetTopicAttributesInput{TopicArn: aws.String(arn)}); err != nil {
		return nil, failed("find topic "+arn, err)
	}
	return heraldaws.NewSNS(client, &heraldaws.SNSConfig{TopicARN: heraldaws.Fixed(arn), MaxMessageBytes: d.maxBytes, Logger: log,
		CloudEvents: d.ce})
}

// loadAWSConfig loads the AWS configuration as the SDK does, with the
// region of the URL, and the credentials, region and profile of the
// daemon's environment. The secret key and session token are registered
// with the redactor first. The SDK logs to log (it would print its
// warnings to stderr), and its retries too when log shows Debug.
func loadAWSConfig(ctx context.Context, inv *invocation, log *slog.Logger, d awsDestination) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{config.WithLogger(heraldaws.Logger(log))}
	if log.Enabled(ctx, slog.LevelDebug) {
		opts = append(opts, config.WithClientLogMode(aws.LogRetries))
	}
	if p, _ := inv.getenv(awsProfileEnv); p != "" {
		opts = append(opts, config.WithSharedConfigProfile(p))
	}
	if r, _ := inv.getenv(awsRegionEnv); r != "" {
		opts = append(opts, config.WithRegion(r))
	}
	if d.region != "" {
		opts = append(opts, config.WithRegion(d.region))
	}
	id, _ := inv.getenv(awsAccessKeyEnv)
	secret, _ := inv.getenv(awsSecretKeyEnv)
	token, _ := inv.getenv(awsSessionTokenEnv)
	inv.stderr.add(secret, token)
	if id != "" && secret != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(id, secret, token)))
	}
	return config.LoadDefaultConfig(ctx, opts...)
}

// awsPartition is the ARN partition of a region.
func awsPartition(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	}
	return "aws"
}

// awsCredentialRefused reports whether an AWS error code says the
// credentials are wrong or lack a permission: configuration, not an AWS
// to wait for.
func awsCredentialRefused(code string) bool {
	switch code {
	case "AccessDenied", "AccessDeniedException", "AuthorizationError", "InvalidClientTokenId",
		"SignatureDoesNotMatch", "UnrecognizedClientException", "ExpiredToken", "ExpiredTokenException",
		"InvalidSecurity", "MissingAuthenticationToken", "IncompleteSignature":
		return true
	}
	return false
}

// mqttOptions are the query parameters of an mqtt:// or mqtts://
// destination, all optional.
var mqttOptions = []string{"topic-prefix", "topic-mapping", "allow-empty-levels", "max-packet-bytes",
	"require-subscribers", "client-id", "keepalive", "ca"}

// mqttHints rewords the MQTT publisher's configuration errors for the
// command line, where its Config is the URL's options.
var mqttHints = strings.NewReplacer(
	"heraldmqtt: ", "",
	"Config.TopicPrefix", "topic-prefix",
	"Config.AllowEmptyLevels", "allow-empty-levels=true",
	"Config.MaxPacketBytes", "max-packet-bytes",
)

// mqttDestination turns an mqtt(s):// URL, mqtt://[user:password@]host[:port][?options],
// into the client's and the publisher's configurations, refusing options
// it does not know. label names the flag or variable in errors.
func mqttDestination(label string, u *url.URL) (autopaho.ClientConfig, heraldmqtt.Config, error) {
	var (
		client autopaho.ClientConfig
		cfg    heraldmqtt.Config
	)
	fail := func(format string, args ...any) (autopaho.ClientConfig, heraldmqtt.Config, error) {
		return client, cfg, usagef("%s: "+format, append([]any{label}, args...)...)
	}
	scheme := strings.ToLower(u.Scheme)
	if u.Path != "" && u.Path != "/" {
		return fail("an %s:// URL has no path: each event's topic names its MQTT topic (add a prefix with topic-prefix=)", scheme)
	}
	q := u.Query()
	for name, values := range q {
		switch {
		case !slices.Contains(mqttOptions, name):
			return fail("option %q is not known: an mqtt(s):// URL takes %s (ca for mqtts:// only)", clean(name), strings.Join(mqttOptions, ", "))
		case len(values) > 1:
			return fail("option %s is given twice", name)
		case name == "ca" && scheme != "mqtts":
			return fail("option ca is for mqtts:// (TLS) only")
		}
	}
	cfg.TopicPrefix = q.Get("topic-prefix")
	switch m := q.Get("topic-mapping"); m {
	case "", heraldmqtt.TopicVerbatim.String():
	case heraldmqtt.TopicDotsToSlashes.String():
		cfg.TopicMapping = heraldmqtt.TopicDotsToSlashes
	default:
		return fail("topic-mapping=%q: use verbatim or dots-to-slashes", clean(m))
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"allow-empty-levels", &cfg.AllowEmptyLevels}, {"require-subscribers", &cfg.RequireSubscribers}} {
		if v := q.Get(b.name); v != "" {
			var err error
			if *b.dst, err = strconv.ParseBool(v); err != nil {
				return fail("%s=%q: use true or false", b.name, clean(v))
			}
		}
	}
	if v := q.Get("max-packet-bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > heraldmqtt.MaxPacketBytes {
			return fail("max-packet-bytes=%q: use a number of bytes from 1 to %d", clean(v), heraldmqtt.MaxPacketBytes)
		}
		cfg.MaxPacketBytes = n
	}
	if v := q.Get("keepalive"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n < 1 {
			return fail("keepalive=%q: use a number of seconds from 1 to 65535", clean(v))
		}
		client.KeepAlive = uint16(n)
	}
	client.ClientID = q.Get("client-id")
	if id := client.ClientID; q.Has("client-id") && (id == "" || len(id) > 256 || clean(id) != id || strings.ContainsAny(id, " +#/")) {
		return fail("client-id=%q: use 1 to 256 printable characters without spaces, '/', '+' or '#'", clean(id))
	}
	if err := cfg.Validate(); err != nil {
		return fail("%s", mqttHints.Replace(err.Error()))
	}

	port := u.Port()
	if port == "" {
		port = "1883"
		if scheme == "mqtts" {
			port = "8883"
		}
	}
	server := &url.URL{Scheme: "mqtt", Host: net.JoinHostPort(u.Hostname(), port)}
	if scheme == "mqtts" {
		server.Scheme = "mqtts"
		tlsCfg, err := mqttTLS(u.Hostname(), q.Get("ca"))
		if err != nil {
			return fail("%v", err)
		}
		client.TlsCfg = tlsCfg
	}
	// The server URL holds no credentials: autopaho quotes it in errors.
	client.ServerUrls = []*url.URL{server}
	if u.User != nil {
		client.ConnectUsername = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			client.ConnectPassword = []byte(pw)
		}
	}
	client.ConnectTimeout = brokerConnectTimeout
	return client, cfg, nil
}

// mqttTLS is the TLS configuration of an mqtts:// destination: the
// system's roots, or the certificates of the PEM file caFile.
func mqttTLS(host, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ca=%s: %w", clean(caFile), errors.Unwrap(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca=%s: no PEM certificate in the file", clean(caFile))
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// openMQTT connects an mqtt(s):// destination's publisher.
func openMQTT(ctx context.Context, inv *invocation, log *slog.Logger, ep endpoint,
	unreachable func(error) error) (herald.Publisher, func(), error) {
	u, err := url.Parse(ep.raw)
	if err != nil {
		return nil, nil, usagef("%s: not a URL", inv.flags.label("destination"))
	}
	client, cfg, err := mqttDestination(inv.flags.label("destination")+" "+ep.name, u)
	if err != nil {
		return nil, nil, err
	}
	cfg.Logger, cfg.CloudEvents = log, ep.ce
	pub, err := heraldmqtt.New(client, &cfg)
	if err != nil {
		return nil, nil, usagef("destination %s: %s", ep.name, mqttHints.Replace(inv.stderr.scrub(err.Error())))
	}
	pctx, cancel := context.WithTimeout(ctx, brokerConnectTimeout)
	defer cancel()
	if err := pub.Connect(pctx); err != nil {
		_ = pub.Close()
		return nil, nil, unreachable(err)
	}
	return pub, func() { _ = pub.Close() }, nil
}

// mqttRefusedCredentials reports whether an MQTT broker's CONNACK refused
// the user name and password, or the client.
func mqttRefusedCredentials(err error) bool {
	var ce *autopaho.ConnackError
	return errors.As(err, &ce) && (ce.ReasonCode == 0x86 || ce.ReasonCode == 0x87 || ce.ReasonCode == 0x8c)
}

// pubsubDest is a pubsub:// destination's settings: pubsub://PROJECT with
// the options emulator=HOST:PORT and prefix=TOPIC_PREFIX.
type pubsubDest struct {
	project, emulator, prefix string
}

// pubsubEmulatorEnv names the emulator's address, as the Pub/Sub client
// reads it; emulator= wins over it.
const pubsubEmulatorEnv = "PUBSUB_EMULATOR_HOST"

// pubsubProject is Google Cloud's rule for project IDs. An emulator takes
// any name (gcloud's own examples use short ones such as "p").
var pubsubProject = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

// parsePubSub checks a pubsub:// URL. Credentials never appear in it: the
// client takes Application Default Credentials. envEmulator is
// PUBSUB_EMULATOR_HOST: with an emulator, from it or from emulator=, the
// project is only a name.
func parsePubSub(label string, u *url.URL, envEmulator string) (pubsubDest, error) {
	d := pubsubDest{project: u.Hostname()}
	emulated := envEmulator != "" || u.Query().Has("emulator")
	switch {
	case u.User != nil:
		return d, usagef("%s: pubsub:// takes no user information: credentials come from Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS)", label)
	case u.Port() != "":
		return d, usagef("%s: pubsub://PROJECT takes no port: give an emulator as ?emulator=HOST:PORT", label)
	case u.Path != "" && u.Path != "/":
		return d, usagef("%s: pubsub://PROJECT takes no path: give a topic prefix as ?prefix=PREFIX", label)
	case emulated && (d.project == "" || strings.ContainsAny(d.project, "/ \t\r\n")):
		return d, usagef("%s: %q is not a project name for the emulator (no '/' or spaces)", label, clean(d.project))
	case !emulated && !pubsubProject.MatchString(d.project):
		return d, usagef("%s: %q is not a Google Cloud project ID (6 to 30 lower-case letters, digits and hyphens, starting with a letter); "+
			"an emulator takes any name: set %s or add ?emulator=HOST:PORT", label, clean(d.project), pubsubEmulatorEnv)
	}
	q := u.Query()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v := q[name]
		switch {
		case name != "emulator" && name != "prefix":
			return d, usagef("%s: pubsub:// option %q is not supported: use emulator=HOST:PORT or prefix=PREFIX", label, clean(name))
		case len(v) != 1:
			return d, usagef("%s: pubsub:// option %s is given %d times", label, name, len(v))
		case name == "prefix":
			if err := heraldpubsub.CheckTopicPrefix(v[0]); err != nil {
				return d, usagef("%s: prefix %s", label, err)
			}
			d.prefix = v[0]
		default:
			if _, port, err := net.SplitHostPort(v[0]); err != nil || port == "" {
				return d, usagef("%s: emulator=%q is not HOST:PORT", label, clean(v[0]))
			}
			d.emulator = v[0]
		}
	}
	return d, nil
}

// openPubSub builds a pubsub:// destination's client and publisher, and
// checks that the service answers.
func openPubSub(ctx context.Context, inv *invocation, log *slog.Logger, ep endpoint) (herald.Publisher, func(), error) {
	label := "destination " + ep.name
	u, err := url.Parse(ep.raw)
	if err != nil {
		return nil, nil, usagef("%s: not a URL", label)
	}
	envEmulator, _ := inv.getenv(pubsubEmulatorEnv)
	d, err := parsePubSub(label, u, envEmulator)
	if err != nil {
		return nil, nil, err
	}
	if d.emulator == "" {
		d.emulator = envEmulator
	}
	// Without an emulator the client finds Application Default
	// Credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's application
	// default login, or the metadata server on Google Cloud.
	var client *pubsub.Client
	if d.emulator != "" {
		client, err = heraldpubsub.NewClient(ctx, d.project, heraldpubsub.EmulatorOptions(d.emulator)...)
	} else {
		client, err = heraldpubsub.NewClient(ctx, d.project)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s (credentials come from Application Default Credentials)", label, inv.stderr.scrub(err.Error()))
	}
	pub, err := heraldpubsub.New(client, &heraldpubsub.Config{TopicPrefix: d.prefix, Logger: log, CloudEvents: ep.ce})
	if err != nil {
		_ = client.Close()
		return nil, nil, usagef("%s: %s", label, strings.ReplaceAll(err.Error(), "Config.TopicPrefix", "prefix="))
	}
	closeAll := func() { _ = pub.Close(); _ = client.Close() }
	pctx, cancel := context.WithTimeout(ctx, brokerConnectTimeout)
	defer cancel()
	if err := pub.Ping(pctx); err != nil {
		closeAll()
		msg := inv.stderr.scrub(herald.Scrub(err.Error()))
		if status.Code(err) == codes.Unauthenticated {
			return nil, nil, fmt.Errorf("destination %s at %s refused the credentials: %s", ep.name, ep.display, msg)
		}
		return nil, nil, &unreachableError{fmt.Sprintf("cannot reach destination %s at %s: %s", ep.name, ep.display, msg)}
	}
	return pub, closeAll, nil
}
