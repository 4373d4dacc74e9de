package main

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
	_ "github.com/herald-outbox/herald/publish/heraldaws"   // sqs:// and sns://
	_ "github.com/herald-outbox/herald/publish/heraldkafka" // kafka://
	_ "github.com/herald-outbox/herald/publish/heraldmqtt"  // mqtt:// and mqtts://
	"github.com/herald-outbox/herald/publish/heraldnats"
	_ "github.com/herald-outbox/herald/publish/heraldpubsub"  // pubsub://
	_ "github.com/herald-outbox/herald/publish/heraldrabbit"  // amqp:// and amqps://
	_ "github.com/herald-outbox/herald/publish/heraldredis"   // redis:// and rediss://
	_ "github.com/herald-outbox/herald/publish/heraldwebhook" // http:// and https://
)

// The daemon opens its destinations through heraldspec, as a service
// embedding the relay would: this file maps its flags and environment
// onto a heraldspec.Destination, and the library's errors onto its
// wording (the flag or variable a destination came from).

// specKind is the publisher of a destination whose package parses its
// own URLs (heraldspec.Register), from the first URL's scheme.
func specKind(raw string) (string, bool) {
	first, _, _ := strings.Cut(raw, ",")
	scheme, _, ok := strings.Cut(strings.TrimSpace(first), "://")
	if !ok {
		return "", false
	}
	s, ok := heraldspec.Lookup(scheme)
	return s.Kind, ok
}

// envSecrets are a destination's secrets as the daemon reads them:
// HERALD_DESTINATION_<NAME>_<WHAT> or, for --publisher,
// HERALD_<KIND>_<WHAT>, each with its _FILE twin; each registered with
// the redactor.
type envSecrets struct {
	inv *invocation
	ep  endpoint
}

func (s envSecrets) Secret(what string) (string, error) { return destinationSecret(s.inv, s.ep, what) }

func (s envSecrets) Where(what string) string { return s.ep.secretEnv(what) }

// parseSpec checks a destination through its publisher package. Every
// secret of its URLs is registered with the redactor first.
func parseSpec(inv *invocation, label string, ep endpoint, kind string) (endpoint, error) {
	ep.kind = kind
	for _, one := range strings.Split(ep.raw, ",") {
		inv.stderr.add(heraldspec.UserinfoSecrets(strings.TrimSpace(one), specUserIsSecret(inv, ep, one))...)
	}
	d := heraldspec.Destination{Name: ep.name, URL: ep.raw, Secrets: envSecrets{inv, ep}, Getenv: inv.getenv,
		// A secret the package reads from a file (a NATS seed) is kept
		// out of every line the daemon prints, as the others are.
		OnSecret: func(secret string) { inv.stderr.add(secret) }}
	if kind == "webhook" {
		if err := webhookSpec(inv, ep, &d); err != nil {
			return ep, err
		}
		label = webhookLabel(label, ep)
	}
	if kind == "sqs" || kind == "sns" {
		d.Getenv = awsGetenv(inv)
	}
	p, err := heraldspec.Parse(d)
	if err != nil {
		return ep, specUsage(inv, label, err)
	}
	ep.spec, ep.display, ep.hosts = p, p.Display(), p.Hosts()
	return ep, nil
}

// specUsage words a heraldspec parse error for the command line: after
// the flag (or variable) the destination came from.
func specUsage(inv *invocation, label string, err error) error {
	var (
		ue *usageError
		se *heraldspec.SchemeError
	)
	switch {
	case errors.As(err, &ue):
		// A secret's variable that cannot be read says so itself.
		return ue
	case errors.As(err, &se) && se.Scheme == "":
		return usagef("%s: %s has no scheme: use %s", label, inv.stderr.scrub(se.URL), supportedSchemes)
	case errors.As(err, &se) && schemes[strings.ToLower(se.Scheme)] != "":
		// A scheme the daemon still opens itself, after a URL of a
		// registered one (nats://a,kafka://b): two brokers.
		return usagef("%s: one destination takes URLs of one broker; give another --destination for %s", label, strings.ToLower(se.Scheme))
	case errors.As(err, &se):
		return usagef("%s: scheme %q is not supported: use %s", label, se.Scheme, supportedSchemes)
	}
	msg := err.Error()
	var e *heraldspec.Error
	if errors.As(err, &e) {
		msg = e.Err.Error()
	}
	msg = strings.Replace(msg, "give another destination for", "give another --destination for", 1)
	msg = secretFileHint(msg)
	msg = webhookNetworkField.ReplaceAllString(msg, webhookAllowEnv)
	return usagef("%s: %s", label, inv.stderr.scrub(msg))
}

// secretVariable finds a message that ends asking for a secret in one of
// the daemon's variables, which also read from the file their _FILE twin
// names (the library knows only where the secret is set).
var secretVariable = regexp.MustCompile(`needs a password in (HERALD_[A-Z0-9_]+)$`)

// secretFileHint adds the variable's _FILE twin to such a message.
func secretFileHint(msg string) string {
	return secretVariable.ReplaceAllString(msg, "$0 (or a file named by ${1}_FILE)")
}

// openSpec opens a destination heraldspec parsed, with the daemon's
// logger, client name and NATS settings. A broker that cannot be reached
// yet is an unreachableError, which the relay's start waits out.
func openSpec(ctx context.Context, inv *invocation, log *slog.Logger, owner string, ep endpoint,
	natsCfg *heraldnats.Config) (herald.Publisher, func(), error) {
	p := ep.spec
	p.Logger, p.CloudEvents, p.ClientName, p.ConnectTimeout = log, ep.ce, "herald relay "+owner, brokerConnectTimeout
	if ep.kind == "nats" && natsCfg != nil {
		cfg := *natsCfg
		p.Config = &cfg
	}
	pub, closer, err := p.Open(ctx)
	if err == nil {
		return pub, closer, nil
	}
	msg := natsHints.Replace(inv.stderr.scrub(err.Error()))
	var oe *heraldspec.OpenError
	if errors.As(err, &oe) && oe.Unreachable {
		return nil, nil, &unreachableError{msg}
	}
	return nil, nil, errors.New(msg)
}

// specUserIsSecret reports whether the user name of a destination URL is
// a secret, by its publisher package's rule when it has one (a NATS
// token unless the PASSWORD variable is set), else by urlUserIsSecret.
func specUserIsSecret(inv *invocation, ep endpoint, raw string) bool {
	scheme, _, _ := strings.Cut(strings.TrimSpace(raw), "://")
	if s, ok := heraldspec.Lookup(scheme); ok && s.UserIsSecret != nil {
		return s.UserIsSecret(&heraldspec.Destination{Name: ep.name, Secrets: envSecrets{inv, ep}, Getenv: inv.getenv})
	}
	return urlUserIsSecret(inv, ep, raw)
}

// natsHints rewords the NATS publisher's errors for the command line: its
// Config is the --nats-* flags.
var natsHints = strings.NewReplacer(
	"heraldnats: Config.CreateStream", "--nats-create-stream",
	"heraldnats: Config.SubjectPrefix", "--nats-subject-prefix",
	"heraldnats: Config.MaxPendingBytes", "--nats-max-pending-bytes",
	"heraldnats: Config.MaxPending", "--nats-max-pending",
	"heraldnats: Config.AckTimeout", "--nats-ack-timeout",
)
