package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// The options of a kafka:// destination:
//
//	kafka://[USER[:PASSWORD]@]HOST:PORT[,kafka://HOST:PORT...][?OPTIONS]
//
// sasl=plain, scram-sha-256 or scram-sha-512 authenticates as USER, with
// the password of the URL or, better, of the destination's PASSWORD
// variable (destination_secrets.go); user information without sasl= is
// refused rather than taken for PLAIN, which would send a password in the
// clear unasked. tls=true dials TLS with the system's roots; ca_file,
// cert_file and key_file imply it.
const optSASL, optTLS = "sasl", "tls"

var kafkaOptions = append([]string{optSASL, optTLS}, tlsOptions...)

// kafkaMechanisms are the values of sasl=.
var kafkaMechanisms = []string{"plain", "scram-sha-256", "scram-sha-512"}

// kafkaAuth is how the daemon authenticates to a kafka:// destination.
type kafkaAuth struct {
	mechanism string // one of kafkaMechanisms; "" without SASL
	user      string
	password  string
	tls       bool
	opts      []kgo.Opt
}

// kafkaDestination reads a kafka:// destination's options and secrets
// into the client's options, refusing what it does not know.
func kafkaDestination(inv *invocation, label string, ep endpoint) (*kafkaAuth, error) {
	fail := func(format string, args ...any) (*kafkaAuth, error) {
		return nil, usagef("%s: "+format, append([]any{label}, args...)...)
	}
	us, err := destinationURLs(ep)
	if err != nil {
		return fail("%v", err)
	}
	opts, err := destinationOptions("kafka://", us, kafkaOptions)
	if err != nil {
		return fail("%v", err)
	}
	for _, u := range us {
		if u.Path != "" && u.Path != "/" {
			return fail("a kafka:// URL has no path: each event's topic names its Kafka topic")
		}
	}
	user, err := destinationUser(us)
	if err != nil {
		return fail("%v", err)
	}
	a := &kafkaAuth{mechanism: strings.ToLower(opts[optSASL])}
	envPassword, err := destinationSecret(inv, ep, "PASSWORD")
	if err != nil {
		return nil, err
	}
	passwordEnv := ep.secretEnv("PASSWORD")
	urlPassword, hasURLPassword := "", false
	if user != nil {
		a.user = user.Username()
		urlPassword, hasURLPassword = user.Password()
	}
	switch {
	case a.mechanism == "" && user != nil:
		return fail("the URL names a user but no SASL mechanism: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512")
	case a.mechanism == "" && envPassword != "":
		return fail("%s is set but the URL has no sasl=: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512, or unset it", passwordEnv)
	case a.mechanism != "" && !slices.Contains(kafkaMechanisms, a.mechanism):
		return fail("sasl=%q is not supported: use %s", clean(opts[optSASL]), strings.Join(kafkaMechanisms, ", "))
	case a.mechanism != "" && a.user == "":
		return fail("sasl=%s needs a user name: kafka://USER@HOST:PORT, its password in %s", a.mechanism, passwordEnv)
	case hasURLPassword && envPassword != "":
		return fail("the URL holds a password and %s is set: give one (the variable keeps it out of the process list)", passwordEnv)
	case a.mechanism != "" && urlPassword == "" && envPassword == "":
		return fail("sasl=%s needs a password in %s (or a file named by %s_FILE)", a.mechanism, passwordEnv, passwordEnv)
	}
	a.password = urlPassword
	if envPassword != "" {
		a.password = envPassword
	}
	if v := opts[optTLS]; v != "" {
		if a.tls, err = strconv.ParseBool(v); err != nil {
			return fail("tls=%q: use true or false", clean(v))
		}
		if !a.tls && hasTLSOption(opts) {
			return fail("tls=false goes with no ca_file, cert_file or key_file")
		}
	}
	if hasTLSOption(opts) {
		a.tls = true
	}
	if a.tls {
		cfg, err := destinationTLS(opts)
		if err != nil {
			return fail("%v", err)
		}
		a.opts = append(a.opts, kgo.DialTLSConfig(cfg))
	}
	if m := a.saslMechanism(); m != nil {
		a.opts = append(a.opts, kgo.SASL(m))
	}
	return a, nil
}

func (a *kafkaAuth) saslMechanism() sasl.Mechanism {
	switch a.mechanism {
	case "plain":
		return plain.Auth{User: a.user, Pass: a.password}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: a.user, Pass: a.password}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: a.user, Pass: a.password}.AsSha512Mechanism()
	}
	return nil
}

// saslHangups counts the SASL authentications a broker answered by
// closing the connection, as some brokers do instead of answering
// SASL_AUTHENTICATION_FAILED.
type saslHangups struct{ n atomic.Int64 }

func (h *saslHangups) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == kmsg.SASLAuthenticate.Int16() && e2e.WriteErr == nil && e2e.ReadErr != nil {
		h.n.Add(1)
	}
}

// openKafka connects a kafka:// destination's publisher.
func openKafka(ctx context.Context, inv *invocation, log *slog.Logger, ep endpoint,
	unreachable func(error) error) (herald.Publisher, func(), error) {
	auth, err := kafkaDestination(inv, ep.label(inv), ep)
	if err != nil {
		return nil, nil, err
	}
	if auth.mechanism == "plain" && !auth.tls {
		log.Warn("SASL PLAIN without TLS sends the Kafka password in the clear: add tls=true", "destination", ep.name)
	}
	hangups := &saslHangups{}
	client, err := heraldkafka.NewClient(ep.hosts,
		append(auth.opts, kgo.WithHooks(hangups), kgo.WithLogger(heraldkafka.Logger(log)))...)
	if err != nil {
		return nil, nil, unreachable(err)
	}
	pctx, cancel := context.WithTimeout(ctx, brokerConnectTimeout)
	defer cancel()
	err = client.Ping(pctx)
	if err != nil && auth.mechanism != "" && hangups.n.Load() > 0 && pctx.Err() == nil {
		// A broker that hangs up on the credentials does so again; a
		// connection lost by chance during the authentication does not.
		before := hangups.n.Load()
		if err = client.Ping(pctx); err != nil && hangups.n.Load() > before {
			err = fmt.Errorf("the broker closed the connection in answer to SASL %s as user %q: %w",
				strings.ToUpper(auth.mechanism), clean(auth.user), errKafkaSASLHangup)
		}
	}
	if err != nil {
		client.Close()
		if refused := destinationRefused(inv, ep, err, kafkaRefusedCredentials(err)); refused != nil {
			return nil, nil, refused
		}
		return nil, nil, unreachable(err)
	}
	pub, err := heraldkafka.New(client, &heraldkafka.Config{Logger: log, CloudEvents: ep.ce})
	if err != nil {
		client.Close()
		return nil, nil, err
	}
	return pub, client.Close, nil
}

var errKafkaSASLHangup = errors.New("SASL authentication refused")

// kafkaRefusedCredentials reports whether a Kafka broker refused the
// SASL mechanism or credentials.
func kafkaRefusedCredentials(err error) bool {
	return errors.Is(err, errKafkaSASLHangup) || errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState)
}
