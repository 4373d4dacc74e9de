package heraldwebhook

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// An http(s):// destination, as heraldspec opens it:
//
//	http[s]://host[:port][/path][?query]
//
// The whole URL is the endpoint every event is POSTed to (Config.Default):
// its path and query belong to the receiver, so Herald reads no option
// from them, and shows only the URL's origin. The signing secret is the
// destination's Secret secret (heraldspec.Secret) and, during a rollover,
// the retiring one its PreviousSecret; without either, Config.Secret and
// Config.PreviousSecret of the Destination's Config. The address guard's
// allow-list (Config.AllowedNetworks) and the other settings come from
// that Config too: a URL cannot widen what the guard lets through.
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:    "webhook",
		Schemes: []string{"http", "https"},
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURL(d, urls[0])
		},
	})
}

// URLConfig is a checked http(s):// destination: the publisher's Config,
// the URL and its secrets in Config.Default. Open builds the publisher.
type URLConfig struct {
	// Config is the publisher's.
	Config Config

	d *heraldspec.Destination
}

// ParseURL checks an http(s):// URL of d (see the package's URL form) and
// the whole configuration it makes, as New does: the secrets, the
// allow-list, a literal address the guard refuses. It connects to
// nothing. Errors name the secret or the Config field at fault, never a
// secret or the URL's path.
func ParseURL(d *heraldspec.Destination, u *url.URL) (*URLConfig, error) {
	c := &URLConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, fmt.Errorf("Config is a %T, not a *heraldwebhook.Config", d.Config)
	}
	if len(c.Config.Endpoints) > 0 || c.Config.Default != (Endpoint{}) {
		return nil, errors.New("Config.Endpoints and Config.Default are for New: a webhook destination posts every event to its URL")
	}
	secret, err := d.Secret(heraldspec.Secret)
	if err != nil {
		return nil, err
	}
	previous, err := d.Secret(heraldspec.PreviousSecret)
	if err != nil {
		return nil, err
	}
	if secret == "" && previous == "" && c.Config.Secret == "" {
		return nil, fmt.Errorf("%s is required: the whsec_... secret every webhook request is signed with", d.SecretWhere(heraldspec.Secret))
	}
	c.Config.Default = Endpoint{URL: u.String(), Secret: secret, PreviousSecret: previous}
	// New checks everything Open will need, and holds nothing but a
	// transport without connections yet.
	pub, err := New(c.config())
	if err != nil {
		return nil, errors.New(urlHints(d).Replace(err.Error()))
	}
	_ = pub.Close()
	return c, nil
}

// urlHints rewords New's errors for a URL destination: its endpoint is
// the URL, and its secrets are the destination's.
func urlHints(d *heraldspec.Destination) *strings.Replacer {
	return strings.NewReplacer(
		"heraldwebhook: ", "",
		"Config.Default.URL: ", "",
		"Config.Default.PreviousSecret", d.SecretWhere(heraldspec.PreviousSecret),
		"Config.Default.Secret", d.SecretWhere(heraldspec.Secret),
	)
}

// config is c.Config with the destination's logger and CloudEvents, when
// it sets them.
func (c *URLConfig) config() *Config {
	cfg := c.Config
	if c.d.Logger != nil {
		cfg.Logger = c.d.Logger
	}
	if c.d.CloudEvents != nil {
		cfg.CloudEvents = c.d.CloudEvents
	}
	return &cfg
}

// Open builds the publisher, with the destination's logger and
// CloudEvents. A webhook connects to nothing until it publishes, so Open
// fails only on a configuration changed since ParseURL.
func (c *URLConfig) Open(context.Context) (herald.Publisher, func(), error) {
	pub, err := New(c.config())
	if err != nil {
		return nil, nil, heraldspec.Failed(c.d, false, err, "destination "+c.d.Name+": "+urlHints(c.d).Replace(err.Error()))
	}
	return pub, func() { _ = pub.Close() }, nil
}
