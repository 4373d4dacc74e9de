package heraldrabbit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// init registers amqp:// and amqps:// with heraldspec (see the package's
// URL form).
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:     "amqp",
		Schemes:  []string{"amqp", "amqps"},
		ManyURLs: true,
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURLs(d, urls)
		},
	})
}

// urlOptions are an amqp(s):// URL's options: Herald's, which it takes
// out before the client parses the URL, and those of RabbitMQ's URI
// specification passed on to the client. The client's TLS options
// (cacertfile, certfile, keyfile) are refused with Herald's names, which
// every destination shares; server_name_indication and auth_mechanism are
// left out: Herald verifies the URL's host and authenticates with the
// URL's user and password (PLAIN).
var urlOptions = heraldspec.ClientOptions{
	Shown: "an amqp(s)://", TLSShown: "amqps://",
	Herald: append([]string{"exchange"}, heraldspec.TLSOptions...),
	Client: []string{"heartbeat", "connection_timeout", "channel_max"},
	Refused: map[string]string{
		"cacertfile": "option cacertfile: write it " + heraldspec.OptCAFile + "= (Herald's name for it)",
		"certfile":   "option certfile: write it " + heraldspec.OptCertFile + "= (Herald's name for it)",
		"keyfile":    "option keyfile: write it " + heraldspec.OptKeyFile + "= (Herald's name for it)",
	},
}

// URLConfig is a checked amqp(s):// destination: the URI the client
// dials, the client's configuration and the publisher's Config. Open
// connects it.
type URLConfig struct {
	// URI is the URL without Herald's options, as Dialer takes it; of a
	// list, the first node's.
	URI string
	// URIs are every node's URI, in the list's order, as ClusterDialer
	// takes them; one URL gives one.
	URIs []string
	// Client is the amqp091 client's configuration: SASL when the
	// password comes from the destination's secrets, and for amqps:// the
	// TLS configuration. Open adds the connection name.
	Client amqp.Config
	// Config is the publisher's.
	Config Config

	d *heraldspec.Destination
}

// ParseURL checks an amqp(s):// URL of d (see the package's URL form) and
// builds the client's configuration: the TLS files are read, nothing is
// dialled. Errors name the option that is wrong, never a secret.
func ParseURL(d *heraldspec.Destination, u *url.URL) (*URLConfig, error) {
	return ParseURLs(d, []*url.URL{u})
}

// ParseURLs is ParseURL for a destination whose URL lists the nodes of one
// cluster, comma-separated. The options, the user information and the
// vhost are written on one URL of the list or on each alike, and hold for
// every node; the URLs are all amqp:// or all amqps://.
func ParseURLs(d *heraldspec.Destination, urls []*url.URL) (*URLConfig, error) {
	if len(urls) == 0 {
		return nil, errors.New("no URL")
	}
	c := &URLConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, fmt.Errorf("Config is a %T, not a *heraldrabbit.Config", d.Config)
	}
	tlsScheme := strings.EqualFold(urls[0].Scheme, "amqps")
	q := url.Values{}
	for _, u := range urls {
		if strings.EqualFold(u.Scheme, "amqps") != tlsScheme {
			return nil, errors.New("the URLs of one destination are all amqp:// or all amqps://")
		}
		uq := u.Query()
		if err := urlOptions.Check(uq); err != nil {
			return nil, err
		}
		for name, vs := range uq {
			if prev, ok := q[name]; ok && prev[0] != vs[0] {
				return nil, fmt.Errorf("option %s differs between the URLs of one destination", name)
			}
			q[name] = vs
		}
	}
	if q.Has("exchange") {
		// New would refuse it too, but naming its Config field.
		if c.Config.Exchange = q.Get("exchange"); len(c.Config.Exchange) > maxShortString {
			return nil, fmt.Errorf("exchange= is %d bytes; AMQP allows %d", len(c.Config.Exchange), maxShortString)
		}
	}
	files := map[string]string{}
	for _, opt := range heraldspec.TLSOptions {
		files[opt] = q.Get(opt)
	}
	if heraldspec.HasTLSOption(files) && !tlsScheme {
		return nil, fmt.Errorf("%s, %s and %s are for amqps:// (TLS) only", heraldspec.OptCAFile, heraldspec.OptCertFile, heraldspec.OptKeyFile)
	}
	nodes := urls
	if len(urls) > 1 {
		var err error
		if nodes, err = spread(urls, q); err != nil {
			return nil, err
		}
	}
	var parsed amqp.URI
	for i, u := range nodes {
		uri := urlOptions.ForClient(u)
		p, err := amqp.ParseURI(uri)
		if err != nil {
			msg := err.Error()
			if p, ok := u.User.Password(); ok && p != "" {
				msg = strings.ReplaceAll(msg, p, heraldspec.Redacted)
			}
			return nil, errors.New(herald.Scrub(msg))
		}
		if i == 0 {
			c.URI, parsed = uri, p
		}
		c.URIs = append(c.URIs, uri)
	}
	password, err := d.Secret(heraldspec.Password)
	if err != nil {
		return nil, err
	}
	if password != "" {
		if _, inURL := nodes[0].User.Password(); inURL {
			return nil, fmt.Errorf("the URL holds a password and %s is set; give one", d.SecretWhere(heraldspec.Password))
		}
		// The user is the URL's, or the client's default (guest).
		c.Client.SASL = []amqp.Authentication{&amqp.PlainAuth{Username: parsed.Username, Password: password}}
	}
	if tlsScheme {
		// Always a configuration of Herald's own: given one, the client
		// ignores its own TLS options of the URL. Of a list, each node is
		// verified for its own host (ClusterDialer).
		serverName := parsed.Host
		if len(nodes) > 1 {
			serverName = ""
		}
		if c.Client.TLSClientConfig, err = heraldspec.TLSConfig(files, serverName); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// spread returns the URLs of a list each with the list's options q, user
// information and vhost, which the list gives on one URL or on each alike.
func spread(urls []*url.URL, q url.Values) ([]*url.URL, error) {
	user, err := heraldspec.User(urls)
	if err != nil {
		return nil, err
	}
	// A path of "" or "/" names no vhost: the default one.
	var vhost *url.URL
	for _, u := range urls {
		switch {
		case u.Path == "" || u.Path == "/":
		case vhost == nil:
			vhost = u
		case vhost.EscapedPath() != u.EscapedPath():
			return nil, errors.New("the URLs of one destination name different vhosts: give it once")
		}
	}
	out := make([]*url.URL, len(urls))
	for i, u := range urls {
		n := *u
		n.User, n.RawQuery, n.ForceQuery = user, q.Encode(), false
		if vhost != nil {
			n.Path, n.RawPath = vhost.Path, vhost.RawPath
		}
		out[i] = &n
	}
	return out, nil
}

// Open connects to the broker, named by the destination's ClientName,
// and returns the publisher and what closes it. The publisher owns the
// connections it dials, and dials again when one is lost.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	d := c.d
	cfg := c.Client
	// A table of its own: the caller's URLConfig stays as it was.
	cfg.Properties = maps.Clone(cfg.Properties)
	if cfg.Properties == nil {
		cfg.Properties = amqp.NewConnectionProperties()
	}
	cfg.Properties.SetClientConnectionName(d.Client())
	uris := c.URIs
	if len(uris) < 2 {
		uris = []string{c.URI}
	}
	dial, err := ClusterDialer(uris, cfg)
	if err != nil { // ParseURL checked the URI
		return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+err.Error())
	}
	pcfg := c.Config
	pcfg.Logger, pcfg.CloudEvents = d.Log(), d.CloudEvents
	pub, err := New(dial, &pcfg)
	if err != nil {
		return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+err.Error())
	}
	pctx, cancel := context.WithTimeout(ctx, d.Timeout())
	defer cancel()
	if err := pub.Connect(pctx); err != nil {
		_ = pub.Close()
		var ae *amqp.Error
		switch cause := tlsCause(err); {
		case cause != nil:
			return nil, nil, heraldspec.TLSHandshakeFailed(d, cause)
		case errors.As(err, &ae) && ae.Code == amqp.AccessRefused:
			return nil, nil, heraldspec.RefusedCredentials(d, err)
		}
		return nil, nil, heraldspec.Unreachable(d, err)
	}
	return pub, func() { _ = pub.Close() }, nil
}

// tlsCause is heraldspec.TLSCause for the AMQP client, which turns an
// error reading the first frame into an *amqp.Error holding its text
// only: a TLS alert the server sends after the handshake (TLS 1.3 checks
// the client's certificate then) arrives that way.
func tlsCause(err error) error {
	if cause := heraldspec.TLSCause(err); cause != nil {
		return cause
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && strings.HasPrefix(ae.Reason, "remote error: tls: ") {
		return errors.New(ae.Reason)
	}
	return nil
}
