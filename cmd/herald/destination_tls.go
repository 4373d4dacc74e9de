package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strings"
)

// A destination's secrets come from the environment (or the files the
// _FILE twins name), never from a flag, which the process list shows:
//
//	HERALD_DESTINATION_<NAME>_<WHAT>  for --destination NAME=URL
//	HERALD_<BROKER>_<WHAT>            for --publisher URL (HERALD_REDIS_PASSWORD)
//
// NAME is the destination's name upper-cased, '-' written '_'; BROKER is
// the publisher's kind (REDIS, AMQP, WEBHOOK). WHAT is PASSWORD for a
// broker's password, SECRET and PREVIOUS_SECRET for a webhook's signing
// secrets.
//
// The variables' names come from endpoint.secretEnv
// (destination_secrets.go); this file adds what the Redis, AMQP and webhook
// destinations need on top: the check that two destinations never share a
// variable, and TLS files bound to a host.

// destinationSecretWhats are the secrets a destination may take from the
// environment, for checkSecretNames.
var destinationSecretWhats = []string{"PASSWORD", "SECRET", "PREVIOUS_SECRET"}

// destinationSecret is destinationSecret that also returns the
// variable's name, for messages.
func (inv *invocation) destinationSecret(ep endpoint, what string) (name, value string, err error) {
	value, err = destinationSecret(inv, ep, what)
	return ep.secretEnv(what), value, err
}

// checkSecretNames refuses destinations whose names spell the same
// variables ("orders-eu" and "orders_eu", or "hook" and "hook_previous",
// whose HERALD_DESTINATION_HOOK_PREVIOUS_SECRET would be both the second's
// secret and the first's previous one): one would take the other's secret.
func checkSecretNames(inv *invocation, endpoints []endpoint) error {
	owner := map[string]string{}
	for _, ep := range endpoints {
		if ep.publisher {
			continue
		}
		for _, what := range destinationSecretWhats {
			v := endpoint{name: ep.name}.secretEnv(what)
			for _, name := range []string{v, v + "_FILE"} {
				if other, ok := owner[name]; ok && other != ep.name {
					return usagef("%s: destinations %s and %s would share the variable %s; rename one",
						inv.flags.label("destination"), other, ep.name, name)
				}
				owner[name] = ep.name
			}
		}
	}
	return nil
}

// tlsFiles are the TLS options of a destination's URL: the CA that signed
// the server's certificate (else the system's roots), and the client's
// certificate and key for servers that ask for one (mutual TLS).
type tlsFiles struct {
	ca, cert, key string
}

func (f tlsFiles) any() bool { return f.ca != "" || f.cert != "" || f.key != "" }

// config reads the files (destinationTLS) into a TLS configuration
// verifying host. Errors name the option and the path, never the files'
// content.
func (f tlsFiles) config(host string) (*tls.Config, error) {
	cfg, err := destinationTLS(map[string]string{optCAFile: f.ca, optCertFile: f.cert, optKeyFile: f.key})
	if err != nil {
		return nil, err
	}
	cfg.ServerName = host
	return cfg, nil
}

// tlsCause returns the error in err's chain that says a TLS handshake
// failed for a reason of configuration, or nil: the server's certificate
// is not trusted or not for this host, or the server refused the client's
// certificate (or its absence). Waiting would not help.
func tlsCause(err error) error {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &verify):
		return verify
	case errors.As(err, &unknown):
		return unknown
	case errors.As(err, &hostname):
		return hostname
	case errors.As(err, &invalid):
		return invalid
	case errors.As(err, &op) && op.Op == "remote error":
		// A TLS alert the server sent: a client certificate refused or
		// missing.
		return op
	}
	return nil
}

// tlsHandshakeFailed is the one line of a destination whose TLS handshake failed
// for a reason of configuration; cause is tlsCause's.
func tlsHandshakeFailed(inv *invocation, ep endpoint, cause error) error {
	return fmt.Errorf("destination %s at %s: the TLS handshake failed: %s (check the URL's %s, %s and %s)",
		ep.name, ep.display, inv.stderr.scrub(cause.Error()), optCAFile, optCertFile, optKeyFile)
}

// clientOptions are the query options of a URL whose client library
// parses the URL itself (redis://, amqp://): Herald's own, which Herald
// reads and takes out, and the client's, passed on.
type clientOptions struct {
	shown, tlsShown string   // "a redis(s)://", "rediss://": for errors
	herald, client  []string // herald's last three are the TLS files
	refused         map[string]string
}

// check refuses an option that is neither Herald's nor the client's, one
// given twice, and one refused with its reason.
func (o clientOptions) check(q url.Values) error {
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case o.refused[name] != "":
			return errors.New(o.refused[name])
		case !slices.Contains(o.herald, name) && !slices.Contains(o.client, name):
			return fmt.Errorf("option %q is not known: %s URL takes %s (the last three for %s only), and the client's %s",
				clean(name), o.shown, strings.Join(o.herald, ", "), o.tlsShown, strings.Join(o.client, ", "))
		case len(q[name]) > 1:
			return fmt.Errorf("option %s is given twice", name)
		}
	}
	return nil
}

// forClient is u without Herald's options, for the client to parse.
func (o clientOptions) forClient(u *url.URL) string {
	q := u.Query()
	for _, name := range o.herald {
		q.Del(name)
	}
	client := *u
	client.RawQuery = q.Encode()
	return client.String()
}
