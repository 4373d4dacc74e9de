package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
)

// A destination's secrets stay out of its URL, which shows in the process
// list: each comes from a variable of its own, or from the file that
// variable's _FILE twin names (inv.env). One scheme for every broker:
//
//	--publisher URL           HERALD_<KIND>_<SECRET>               HERALD_KAFKA_PASSWORD, HERALD_NATS_TOKEN
//	--destination NAME=URL    HERALD_DESTINATION_<NAME>_<SECRET>   HERALD_DESTINATION_EVENTS_PASSWORD
//
// KIND is the publisher the URL's scheme picks (kafka, nats, redis, amqp,
// ...), NAME the destination's name; both upper-cased, '-' written '_'.
// SECRET says what it holds: PASSWORD, TOKEN.

// secretEnv names the variable of one of ep's secrets.
func (ep endpoint) secretEnv(secret string) string {
	if ep.publisher {
		return envWord("HERALD_" + ep.kind + "_" + secret)
	}
	return envWord("HERALD_DESTINATION_" + ep.name + "_" + secret)
}

func envWord(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "-", "_")) }

// destinationSecret reads one of ep's secrets (secretEnv, or its _FILE
// twin) and registers it with the redactor; "" when neither is set.
func destinationSecret(inv *invocation, ep endpoint, secret string) (string, error) {
	v, err := inv.env(ep.secretEnv(secret))
	if err != nil {
		return "", err
	}
	inv.stderr.add(v)
	return v, nil
}

// label names where ep was given, for errors: --publisher or
// --destination NAME (or the variable they came from).
func (ep endpoint) label(inv *invocation) string {
	if ep.publisher {
		return inv.flags.label("publisher")
	}
	return inv.flags.label("destination") + " " + ep.name
}

// destinationURLs parses ep's comma-separated URLs again; parseEndpoint
// has checked each.
func destinationURLs(ep endpoint) ([]*url.URL, error) {
	var us []*url.URL
	for _, one := range strings.Split(ep.raw, ",") {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			return nil, usagef("not a URL")
		}
		us = append(us, u)
	}
	return us, nil
}

// destinationOptions merges the query options of a destination's URLs,
// refusing any option not in accepted, and one that two URLs give
// different values: options may be written on any URL of a list, or on
// each alike. scheme names the URLs in the error (kafka://).
func destinationOptions(scheme string, us []*url.URL, accepted []string) (map[string]string, error) {
	opts := map[string]string{}
	for _, u := range us {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, fmt.Errorf("the query is not name=value pairs")
		}
		names := make([]string, 0, len(q))
		for name := range q {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			vs := q[name]
			prev, seen := opts[name]
			switch {
			case !slices.Contains(accepted, name):
				return nil, fmt.Errorf("option %q is not known: a %s URL takes %s", clean(name), scheme, strings.Join(accepted, ", "))
			case len(vs) > 1:
				return nil, fmt.Errorf("option %s is given twice", name)
			case vs[0] == "":
				return nil, fmt.Errorf("option %s has no value", name)
			case seen && prev != vs[0]:
				return nil, fmt.Errorf("option %s differs between the URLs of one destination", name)
			}
			opts[name] = vs[0]
		}
	}
	return opts, nil
}

// destinationUser is the user information of a destination's URLs, which
// a list writes on one URL or on each alike.
func destinationUser(us []*url.URL) (*url.Userinfo, error) {
	var user *url.Userinfo
	for _, u := range us {
		switch {
		case u.User == nil:
		case user == nil:
			user = u.User
		case user.String() != u.User.String():
			return nil, fmt.Errorf("the URLs of one destination give different user information: give it once")
		}
	}
	return user, nil
}

// The TLS options of a destination's URL: the CA to trust instead of the
// system's roots, and a client certificate and its key (mutual TLS).
const (
	optCAFile   = "ca_file"
	optCertFile = "cert_file"
	optKeyFile  = "key_file"
)

// tlsOptions are the options destinationTLS reads.
var tlsOptions = []string{optCAFile, optCertFile, optKeyFile}

// destinationTLS is the TLS configuration of a destination's options:
// the system's roots, or the PEM certificates of ca_file; the key pair
// of cert_file and key_file, given together. A file that cannot be read
// or holds no certificate is refused with its path. The server name is
// left to the client, which uses the host it dials.
func destinationTLS(opts map[string]string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if path := opts[optCAFile]; path != "" {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s=%s: cannot read it: %v", optCAFile, clean(path), pathReason(err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s=%s: no PEM certificate in the file", optCAFile, clean(path))
		}
		cfg.RootCAs = pool
	}
	cert, key := opts[optCertFile], opts[optKeyFile]
	switch {
	case cert == "" && key == "":
		return cfg, nil
	case cert == "" || key == "":
		return nil, fmt.Errorf("%s and %s go together (a client certificate and its key)", optCertFile, optKeyFile)
	}
	for _, f := range []struct{ opt, path string }{{optCertFile, cert}, {optKeyFile, key}} {
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("%s=%s: cannot read it: %v", f.opt, clean(f.path), pathReason(err))
		}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		// The error may quote neither file's content: crypto/tls says
		// what is wrong, not what it read.
		return nil, fmt.Errorf("%s=%s and %s=%s are not a certificate and its key: %s",
			optCertFile, clean(cert), optKeyFile, clean(key), strings.TrimPrefix(pathReason(err).Error(), "tls: "))
	}
	cfg.Certificates = []tls.Certificate{pair}
	return cfg, nil
}

// hasTLSOption reports whether opts set any TLS file.
func hasTLSOption(opts map[string]string) bool {
	return opts[optCAFile] != "" || opts[optCertFile] != "" || opts[optKeyFile] != ""
}

// tlsRefusal says why a destination's TLS handshake failed for a reason
// waiting will not cure, "" for any other error: the relay does not trust
// the server's certificate, or the server refused the relay's (a TLS
// alert, such as "certificate required" or "bad certificate").
func tlsRefusal(err error) (credentials bool, reason string) {
	var (
		verify *tls.CertificateVerificationError
		ua     x509.UnknownAuthorityError
		host   x509.HostnameError
		inv    x509.CertificateInvalidError
		op     *net.OpError
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &ua), errors.As(err, &host), errors.As(err, &inv):
		return false, "the server's certificate is not trusted (give its CA as ca_file=)"
	case errors.As(err, &op) && op.Op == "remote error":
		return true, "the server refused the TLS handshake (check cert_file= and key_file=)"
	}
	return false, ""
}

// destinationRefused is the error that stops the relay's start when err
// says the destination refused its configuration (refused says whether
// the broker refused the credentials), nil when err may pass: a broker
// that cannot be reached yet.
func destinationRefused(inv *invocation, ep endpoint, err error, refused bool) error {
	msg := inv.stderr.scrub(err.Error())
	credentials, reason := tlsRefusal(err)
	switch {
	case refused || credentials:
		if reason != "" {
			msg = reason + ": " + msg
		}
		return fmt.Errorf("destination %s at %s refused the credentials: %s", ep.name, ep.display, msg)
	case reason != "":
		return fmt.Errorf("destination %s at %s: %s: %s", ep.name, ep.display, reason, msg)
	}
	return nil
}

// urlUserIsSecret reports whether the user name of a destination URL is
// a secret: a NATS token (nats://TOKEN@host) unless the destination's
// PASSWORD variable makes it a user name; never for Kafka, whose user
// information is always a user name; for the others, as before.
func urlUserIsSecret(inv *invocation, ep endpoint, raw string) bool {
	scheme, _, _ := strings.Cut(raw, "://")
	switch ep.kind = schemes[strings.ToLower(scheme)]; ep.kind {
	case "kafka":
		return false
	case "nats":
		password, err := inv.env(ep.secretEnv("PASSWORD"))
		return err != nil || password == ""
	}
	return true
}

// urlUserSecrets returns the password of u, and its user name when
// userIsSecret and there is no password (a token).
func urlUserSecrets(u *url.URL, userIsSecret bool) []string {
	if u.User == nil {
		return nil
	}
	if _, has := u.User.Password(); has || userIsSecret {
		return urlSecrets(u)
	}
	return nil
}
