package heraldkafka

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
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
	"github.com/herald-outbox/herald/heraldspec"
)

// A kafka:// destination, as heraldspec opens it: see the package's URL
// form. The URLs of a list are the seed brokers of one cluster.
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:     "kafka",
		Schemes:  []string{"kafka"},
		ManyURLs: true,
		// A Kafka URL's user information is always a user name (its
		// password, if any, follows a ':'), never a token.
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURLs(d, urls)
		},
	})
}

// The options of a kafka:// URL.
const (
	optSASL            = "sasl"
	optTLS             = "tls"
	optTransactional   = "transactional"
	optTransactionalID = "transactional_id"
)

var urlOptions = append([]string{optSASL, optTLS, optTransactional, optTransactionalID}, heraldspec.TLSOptions...)

// Mechanisms are the values of a kafka:// URL's sasl= option.
var Mechanisms = []string{"plain", "scram-sha-256", "scram-sha-512"}

// URLConfig is a checked kafka:// destination: the client's seed brokers
// and options, and the publisher's Config. Open connects it.
type URLConfig struct {
	// Brokers are the seed brokers, host:port, one per URL.
	Brokers []string
	// Options are the client's options for NewClient: the TLS dialer and
	// the SASL mechanism, its password included, when the URL asks for
	// them.
	Options []kgo.Opt
	// Mechanism is the URL's sasl= in lower case (one of Mechanisms), ""
	// without SASL.
	Mechanism string
	// User is the SASL user name, "" without SASL.
	User string
	// TLS says the client dials TLS: tls=true, or a TLS file option.
	TLS bool
	// Config is the publisher's.
	Config Config

	d *heraldspec.Destination
}

// ParseURLs checks the kafka:// URLs of d (see the package's URL form) and
// builds the client's options: the TLS files and the password are read,
// nothing is dialled. Errors name the option that is wrong, never a secret.
func ParseURLs(d *heraldspec.Destination, urls []*url.URL) (*URLConfig, error) {
	c := &URLConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, fmt.Errorf("Config is a %T, not a *heraldkafka.Config", d.Config)
	}
	opts, err := heraldspec.Options("kafka://", urls, urlOptions)
	if err != nil {
		return nil, err
	}
	for _, u := range urls {
		if u.Path != "" && u.Path != "/" {
			return nil, errors.New("a kafka:// URL has no path: each event's topic names its Kafka topic")
		}
		c.Brokers = append(c.Brokers, u.Host)
	}
	user, err := heraldspec.User(urls)
	if err != nil {
		return nil, err
	}
	password, err := c.sasl(d, opts[optSASL], user)
	if err != nil {
		return nil, err
	}
	if v := opts[optTLS]; v != "" {
		if c.TLS, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("tls=%q: use true or false", heraldspec.Clean(v))
		}
		if !c.TLS && heraldspec.HasTLSOption(opts) {
			return nil, errors.New("tls=false goes with no ca_file, cert_file or key_file")
		}
	}
	if heraldspec.HasTLSOption(opts) {
		c.TLS = true
	}
	if c.TLS {
		// The client verifies each broker under the host it dials.
		cfg, err := heraldspec.TLSConfig(opts, "")
		if err != nil {
			return nil, err
		}
		c.Options = append(c.Options, kgo.DialTLSConfig(cfg))
	}
	if m := saslMechanism(c.Mechanism, c.User, password); m != nil {
		c.Options = append(c.Options, kgo.SASL(m))
	}
	if err := c.transactional(opts[optTransactional], opts[optTransactionalID]); err != nil {
		return nil, err
	}
	return c, nil
}

// transactional applies transactional= and transactional_id= to c.Config.
func (c *URLConfig) transactional(on, id string) error {
	if on != "" {
		b, err := strconv.ParseBool(on)
		if err != nil {
			return fmt.Errorf("transactional=%q: use true or false", heraldspec.Clean(on))
		}
		switch {
		case b && c.Config.Transactional == nil:
			c.Config.Transactional = &Transactional{}
		case !b && c.Config.Transactional != nil:
			return errors.New("transactional=false, but the destination's Go Config sets Transactional")
		}
	}
	if id == "" {
		return nil
	}
	if c.Config.Transactional == nil {
		return errors.New("transactional_id= goes with transactional=true")
	}
	t := *c.Config.Transactional
	t.ID = id
	if _, err := t.withDefaults(); err != nil {
		return fmt.Errorf("transactional_id=%q: %w", heraldspec.Clean(id), err)
	}
	c.Config.Transactional = &t
	return nil
}

// sasl checks the URL's sasl= against its user information and d's
// Password secret, sets c.Mechanism and c.User, and returns the password.
// User information without sasl= is refused rather than taken for PLAIN,
// which would send a password in the clear unasked.
func (c *URLConfig) sasl(d *heraldspec.Destination, mechanism string, user *url.Userinfo) (string, error) {
	c.Mechanism = strings.ToLower(mechanism)
	secret, err := d.Secret(heraldspec.Password)
	if err != nil {
		return "", err
	}
	where := d.SecretWhere(heraldspec.Password)
	urlPassword, hasURLPassword := "", false
	if user != nil {
		c.User = user.Username()
		urlPassword, hasURLPassword = user.Password()
	}
	switch {
	case c.Mechanism == "" && user != nil:
		return "", errors.New("the URL names a user but no SASL mechanism: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512")
	case c.Mechanism == "" && secret != "":
		return "", fmt.Errorf("%s is set but the URL has no sasl=: add sasl=plain, sasl=scram-sha-256 or sasl=scram-sha-512, or unset it", where)
	case c.Mechanism != "" && !slices.Contains(Mechanisms, c.Mechanism):
		return "", fmt.Errorf("sasl=%q is not supported: use %s", heraldspec.Clean(mechanism), strings.Join(Mechanisms, ", "))
	case c.Mechanism != "" && c.User == "":
		return "", fmt.Errorf("sasl=%s needs a user name: kafka://USER@HOST:PORT, its password in %s", c.Mechanism, where)
	case hasURLPassword && secret != "":
		return "", fmt.Errorf("the URL holds a password and %s is set: give one (the variable keeps it out of the process list)", where)
	case c.Mechanism != "" && urlPassword == "" && secret == "":
		return "", fmt.Errorf("sasl=%s needs a password in %s", c.Mechanism, where)
	}
	if secret != "" {
		return secret, nil
	}
	return urlPassword, nil
}

// saslMechanism is franz-go's mechanism of one of Mechanisms, nil for "".
func saslMechanism(mechanism, user, password string) sasl.Mechanism {
	switch mechanism {
	case "plain":
		return plain.Auth{User: user, Pass: password}.AsMechanism()
	case "scram-sha-256":
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism()
	case "scram-sha-512":
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism()
	}
	return nil
}

// Open builds the client (NewClient), checks within the destination's
// connect timeout that a broker answers, and returns the publisher and
// what closes the client. A broker that refuses the credentials or the
// TLS handshake is refused; one that does not answer is unreachable. SASL
// PLAIN without TLS is logged at Warn: it sends the password in the
// clear.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	log := c.d.Log()
	if c.Mechanism == "plain" && !c.TLS {
		log.Warn("SASL PLAIN without TLS sends the Kafka password in the clear: add tls=true", "destination", c.d.Name)
	}
	hangups := &saslHangups{}
	client, err := NewClient(c.Brokers, append(slices.Clone(c.Options), kgo.WithHooks(hangups), kgo.WithLogger(Logger(log)))...)
	if err != nil {
		// NewClient connects to nothing: its error is the options'.
		return nil, nil, heraldspec.Failed(c.d, false, err, "destination "+c.d.Name+": "+err.Error())
	}
	pctx, cancel := context.WithTimeout(ctx, c.d.Timeout())
	defer cancel()
	err = client.Ping(pctx)
	if err != nil && c.Mechanism != "" && hangups.n.Load() > 0 && pctx.Err() == nil {
		// A broker that hangs up on the credentials does so again; a
		// connection lost by chance during the authentication does not.
		before := hangups.n.Load()
		if err = client.Ping(pctx); err != nil && hangups.n.Load() > before {
			err = fmt.Errorf("the broker closed the connection in answer to SASL %s as user %q: %w",
				strings.ToUpper(c.Mechanism), heraldspec.Clean(c.User), errSASLHangup)
		}
	}
	if err != nil {
		client.Close()
		if refused := heraldspec.ClassifyRefusal(c.d, err, refusedCredentials(err)); refused != nil {
			return nil, nil, refused
		}
		return nil, nil, heraldspec.Unreachable(c.d, err)
	}
	cfg := c.Config
	cfg.Logger, cfg.CloudEvents = log, c.d.CloudEvents
	if cfg.Transactional != nil && cfg.Transactional.ID == "" {
		// Two destinations of one daemon must not share the ids.
		t := *cfg.Transactional
		if host, err := os.Hostname(); err == nil && host != "" {
			t.ID = "herald-" + host + "-" + c.d.Name
		}
		cfg.Transactional = &t
	}
	pub, err := New(client, &cfg)
	if err != nil {
		client.Close()
		return nil, nil, heraldspec.Failed(c.d, false, err, "destination "+c.d.Name+": "+err.Error())
	}
	return pub, func() { pub.Close(); client.Close() }, nil
}

// saslHangups counts the SASL authentications a broker answered by
// closing the connection, as some brokers (kfake among them) do instead
// of answering SASL_AUTHENTICATION_FAILED.
type saslHangups struct{ n atomic.Int64 }

func (h *saslHangups) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == kmsg.SASLAuthenticate.Int16() && e2e.WriteErr == nil && e2e.ReadErr != nil {
		h.n.Add(1)
	}
}

// errSASLHangup is a broker that hung up on the SASL authentication twice.
var errSASLHangup = errors.New("SASL authentication refused")

// refusedCredentials reports whether a Kafka broker refused the SASL
// mechanism or the credentials.
func refusedCredentials(err error) bool {
	return errors.Is(err, errSASLHangup) || errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState)
}
