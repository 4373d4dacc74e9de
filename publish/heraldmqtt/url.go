package heraldmqtt

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/eclipse/paho.golang/autopaho"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// init registers mqtt:// and mqtts:// with heraldspec (see the package's
// URL form).
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:    "mqtt",
		Schemes: []string{"mqtt", "mqtts"},
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURL(d, urls[0])
		},
	})
}

// urlOptions are the query options of an mqtt(s):// URL, all optional.
// The CA option is ca, as it always was for MQTT destinations.
var urlOptions = []string{"topic-prefix", "topic-mapping", "allow-empty-levels", "max-packet-bytes",
	"require-subscribers", "client-id", "keepalive", "ca"}

// urlHints rewords the Config's errors for a URL, whose options set it.
var urlHints = strings.NewReplacer(
	"heraldmqtt: ", "",
	"Config.TopicPrefix", "topic-prefix",
	"Config.AllowEmptyLevels", "allow-empty-levels=true",
	"Config.MaxPacketBytes", "max-packet-bytes",
)

// URLConfig is a checked mqtt(s):// destination: the client's
// configuration and the publisher's Config. Open connects it.
type URLConfig struct {
	// Client is autopaho's configuration: the server URL (without the
	// credentials, which autopaho would quote in errors), the user name
	// and password, the client id and keep-alive, and for mqtts:// the
	// TLS configuration. Open adds the connect timeout, and a client id
	// when the URL gives none.
	Client autopaho.ClientConfig
	// Config is the publisher's.
	Config Config

	d *heraldspec.Destination
}

// ParseURL checks an mqtt(s):// URL of d (see the package's URL form) and
// builds the client's and the publisher's configurations: the CA file is
// read, nothing is dialled. Errors name the option that is wrong, never a
// secret.
func ParseURL(d *heraldspec.Destination, u *url.URL) (*URLConfig, error) {
	c := &URLConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, fmt.Errorf("Config is a %T, not a *heraldmqtt.Config", d.Config)
	}
	scheme := strings.ToLower(u.Scheme)
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("an %s:// URL has no path: each event's topic names its MQTT topic (add a prefix with topic-prefix=)", scheme)
	}
	q := u.Query()
	for _, name := range slices.Sorted(maps.Keys(q)) {
		switch {
		case !slices.Contains(urlOptions, name):
			return nil, fmt.Errorf("option %q is not known: an mqtt(s):// URL takes %s (ca for mqtts:// only)",
				heraldspec.Clean(name), strings.Join(urlOptions, ", "))
		case len(q[name]) > 1:
			return nil, fmt.Errorf("option %s is given twice", name)
		case name == "ca" && scheme != "mqtts":
			return nil, errors.New("option ca is for mqtts:// (TLS) only")
		}
	}
	if err := c.options(q); err != nil {
		return nil, err
	}
	if err := c.Config.Validate(); err != nil {
		return nil, errors.New(urlHints.Replace(err.Error()))
	}

	port := u.Port()
	if port == "" {
		port = "1883"
		if scheme == "mqtts" {
			port = "8883"
		}
	}
	server := &url.URL{Scheme: scheme, Host: net.JoinHostPort(u.Hostname(), port)}
	if scheme == "mqtts" {
		cfg, err := caConfig(u.Hostname(), q.Get("ca"))
		if err != nil {
			return nil, err
		}
		c.Client.TlsCfg = cfg
	}
	// The server URL holds no credentials: autopaho quotes it in errors.
	c.Client.ServerUrls = []*url.URL{server}
	if u.User != nil {
		c.Client.ConnectUsername = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			c.Client.ConnectPassword = []byte(pw)
		}
	}
	password, err := d.Secret(heraldspec.Password)
	if err != nil {
		return nil, err
	}
	if password != "" {
		if _, inURL := u.User.Password(); inURL {
			return nil, fmt.Errorf("the URL holds a password and %s is set; give one", d.SecretWhere(heraldspec.Password))
		}
		c.Client.ConnectPassword = []byte(password)
	}
	return c, nil
}

// options reads the URL's options but ca into c.
func (c *URLConfig) options(q url.Values) error {
	if v := q.Get("topic-prefix"); q.Has("topic-prefix") {
		c.Config.TopicPrefix = v
	}
	switch m := q.Get("topic-mapping"); m {
	case "":
	case TopicVerbatim.String():
		c.Config.TopicMapping = TopicVerbatim
	case TopicDotsToSlashes.String():
		c.Config.TopicMapping = TopicDotsToSlashes
	default:
		return fmt.Errorf("topic-mapping=%q: use verbatim or dots-to-slashes", heraldspec.Clean(m))
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{{"allow-empty-levels", &c.Config.AllowEmptyLevels}, {"require-subscribers", &c.Config.RequireSubscribers}} {
		if v := q.Get(b.name); v != "" {
			var err error
			if *b.dst, err = strconv.ParseBool(v); err != nil {
				return fmt.Errorf("%s=%q: use true or false", b.name, heraldspec.Clean(v))
			}
		}
	}
	if v := q.Get("max-packet-bytes"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxPacketBytes {
			return fmt.Errorf("max-packet-bytes=%q: use a number of bytes from 1 to %d", heraldspec.Clean(v), MaxPacketBytes)
		}
		c.Config.MaxPacketBytes = n
	}
	if v := q.Get("keepalive"); v != "" {
		n, err := strconv.ParseUint(v, 10, 16)
		if err != nil || n < 1 {
			return fmt.Errorf("keepalive=%q: use a number of seconds from 1 to 65535", heraldspec.Clean(v))
		}
		c.Client.KeepAlive = uint16(n)
	}
	if id := q.Get("client-id"); q.Has("client-id") {
		if !validClientID(id) {
			return fmt.Errorf("client-id=%q: use 1 to 256 printable characters without spaces, '/', '+' or '#'", heraldspec.Clean(id))
		}
		c.Client.ClientID = id
	}
	return nil
}

// validClientID reports whether id is a client id the URL may give: what
// every broker takes, and what shows plainly in its logs.
func validClientID(id string) bool {
	return id != "" && len(id) <= 256 && heraldspec.Clean(id) == id && !strings.ContainsAny(id, " +#/")
}

// caConfig is the TLS configuration of an mqtts:// destination: the
// system's roots, or the certificates of the PEM file caFile.
func caConfig(host, caFile string) (*tls.Config, error) {
	cfg := &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("ca=%s: %v", heraldspec.Clean(caFile), heraldspec.PathReason(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("ca=%s: no PEM certificate in the file", heraldspec.Clean(caFile))
	}
	cfg.RootCAs = pool
	return cfg, nil
}

// clientID is the client id of a connection whose URL gives none: the
// destination's ClientName, made a valid client id, and random hex digits,
// so that the broker's logs say whose it is and two relays of one name
// never take over each other's connection.
func clientID(name string) (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a client id: %w", err)
	}
	name = strings.Map(func(r rune) rune {
		if r == ' ' || r == '+' || r == '#' || r == '/' {
			return '-'
		}
		return r
	}, heraldspec.Clean(name))
	if len(name) > 200 {
		name = name[:200]
	}
	id := name + "-" + hex.EncodeToString(b[:])
	if !validClientID(id) { // a name that cut mid-character
		id = "herald-" + hex.EncodeToString(b[:])
	}
	return id, nil
}

// refusedCredentials reports whether the broker's CONNACK refused the user
// name and password (0x86), the client (0x87 Not authorized) or the
// authentication method (0x8C).
func refusedCredentials(err error) bool {
	var ce *autopaho.ConnackError
	return errors.As(err, &ce) && (ce.ReasonCode == 0x86 || ce.ReasonCode == 0x87 || ce.ReasonCode == 0x8c)
}

// Open connects to the broker and returns the publisher and what closes
// it. A broker whose CONNACK refuses the credentials, or whose TLS
// certificate is not trusted, is refused; any other failure to connect is
// a broker that could not be reached.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	d := c.d
	client := c.Client
	if client.ConnectTimeout == 0 {
		client.ConnectTimeout = d.Timeout()
	}
	if client.ClientID == "" {
		id, err := clientID(d.Client())
		if err != nil {
			return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+err.Error())
		}
		client.ClientID = id
	}
	cfg := c.Config
	cfg.Logger, cfg.CloudEvents = d.Log(), d.CloudEvents
	pub, err := New(client, &cfg)
	if err != nil {
		return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+urlHints.Replace(err.Error()))
	}
	pctx, cancel := context.WithTimeout(ctx, d.Timeout())
	defer cancel()
	if err := pub.Connect(pctx); err != nil {
		_ = pub.Close()
		switch cause := heraldspec.TLSCause(err); {
		case cause != nil:
			return nil, nil, heraldspec.Refused(d, cause, ": the TLS handshake failed: %s (check the URL's ca=)", cause.Error())
		case refusedCredentials(err):
			return nil, nil, heraldspec.RefusedCredentials(d, err)
		}
		return nil, nil, heraldspec.Unreachable(d, err)
	}
	return pub, func() { _ = pub.Close() }, nil
}
