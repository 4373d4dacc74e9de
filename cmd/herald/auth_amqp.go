package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldrabbit"
)

// amqpHeraldOptions are the options of an amqp(s):// URL that Herald reads
// itself and takes out before the client parses the URL: the exchange, and
// the TLS files (amqps:// only).
var amqpHeraldOptions = []string{"exchange", optCAFile, optCertFile, optKeyFile}

// amqpClientOptions are the URL options of RabbitMQ's URI specification
// that the daemon passes on to the client. Its TLS options (cacertfile,
// certfile, keyfile, server_name_indication) are Herald's ca_file,
// cert_file and key_file here, and auth_mechanism is left out: the daemon
// authenticates with the URL's user and password (PLAIN).
var amqpClientOptions = []string{"heartbeat", "connection_timeout", "channel_max"}

// amqpOptions are an amqp(s):// URL's options. RabbitMQ's spellings of the
// TLS options are refused with Herald's.
var amqpOptions = clientOptions{shown: "an amqp(s)://", tlsShown: "amqps://", herald: amqpHeraldOptions, client: amqpClientOptions,
	refused: map[string]string{
		"cacertfile": "option cacertfile: write it " + optCAFile + "= (Herald's name for it)",
		"certfile":   "option certfile: write it " + optCertFile + "= (Herald's name for it)",
		"keyfile":    "option keyfile: write it " + optKeyFile + "= (Herald's name for it)",
	}}

// amqpDest is a checked amqp(s):// destination.
type amqpDest struct {
	uri      string // without Herald's options
	exchange string
	cfg      amqp.Config
}

// amqpDestination checks an amqp(s):// URL,
// amqp[s]://[user[:password]@]host[:port][/vhost][?options], and builds
// the client's configuration: the password from the URL or from the
// destination's PASSWORD variable (not both), and for amqps:// the TLS
// configuration (the system's roots, or ca_file=; a client certificate
// with cert_file= and key_file=). It reads files but connects to nothing,
// so parseEndpoint calls it before the relay waits for its database. label
// names the flag or variable in errors.
func amqpDestination(inv *invocation, label string, ep endpoint, u *url.URL) (amqpDest, error) {
	var d amqpDest
	fail := func(format string, args ...any) (amqpDest, error) {
		return d, usagef("%s: "+format, append([]any{label}, args...)...)
	}
	tlsScheme := strings.EqualFold(u.Scheme, "amqps")
	q := u.Query()
	if err := amqpOptions.check(q); err != nil {
		return fail("%s", err)
	}
	// AMQP names are short strings.
	if d.exchange = q.Get("exchange"); len(d.exchange) > 255 {
		return fail("exchange= is %d bytes; AMQP allows 255", len(d.exchange))
	}
	files := tlsFiles{ca: q.Get(optCAFile), cert: q.Get(optCertFile), key: q.Get(optKeyFile)}
	if files.any() && !tlsScheme {
		return fail("%s, %s and %s are for amqps:// (TLS) only", optCAFile, optCertFile, optKeyFile)
	}
	d.uri = amqpOptions.forClient(u)
	parsed, err := amqp.ParseURI(d.uri)
	if err != nil {
		return fail("%s", inv.stderr.scrub(err.Error()))
	}
	envName, password, err := inv.destinationSecret(ep, "PASSWORD")
	if err != nil {
		return d, err
	}
	if password != "" {
		if _, inURL := u.User.Password(); inURL {
			return fail("the URL holds a password and %s is set; give one", envName)
		}
		// The user is the URL's, or the client's default (guest).
		d.cfg.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: parsed.Username, Password: password}}
	}
	if tlsScheme {
		// Always a configuration of Herald's own: given one, the client
		// ignores its own TLS options of the URL.
		if d.cfg.TLSClientConfig, err = files.config(parsed.Host); err != nil {
			return fail("%v", err)
		}
	}
	return d, nil
}

// openAMQP connects an amqp(s):// destination's publisher. The publisher
// owns the connections it dials, and dials again when one is lost.
func openAMQP(ctx context.Context, inv *invocation, log *slog.Logger, owner string, ep endpoint,
	unreachable func(error) error) (herald.Publisher, func(), error) {
	label := "destination " + ep.name
	u, err := url.Parse(ep.raw)
	if err != nil {
		return nil, nil, usagef("%s: not a URL", label)
	}
	d, err := amqpDestination(inv, label, ep, u)
	if err != nil {
		return nil, nil, err
	}
	d.cfg.Properties = amqp.NewConnectionProperties()
	d.cfg.Properties.SetClientConnectionName("herald relay " + owner)
	dial, err := heraldrabbit.Dialer(d.uri, d.cfg)
	if err != nil {
		return nil, nil, usagef("%s: %s", label, inv.stderr.scrub(err.Error()))
	}
	pub, err := heraldrabbit.New(dial, &heraldrabbit.Config{Exchange: d.exchange, Logger: log, CloudEvents: ep.ce})
	if err != nil { // amqpDestination checked what the URL can set
		return nil, nil, fmt.Errorf("%s: %w", label, err)
	}
	pctx, cancel := context.WithTimeout(ctx, brokerConnectTimeout)
	defer cancel()
	if err := pub.Connect(pctx); err != nil {
		_ = pub.Close()
		if cause := amqpTLSCause(err); cause != nil {
			return nil, nil, tlsHandshakeFailed(inv, ep, cause)
		}
		return nil, nil, unreachable(err)
	}
	return pub, func() { _ = pub.Close() }, nil
}

// amqpTLSCause is tlsCause for the AMQP client, which turns an error
// reading the first frame into an *amqp.Error holding its text only: a
// TLS alert the server sends after the handshake (TLS 1.3 checks the
// client's certificate then) arrives that way.
func amqpTLSCause(err error) error {
	if cause := tlsCause(err); cause != nil {
		return cause
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && strings.HasPrefix(ae.Reason, "remote error: tls: ") {
		return errors.New(ae.Reason)
	}
	return nil
}
