package heraldpubsub

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"cloud.google.com/go/pubsub/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// A pubsub:// destination, as heraldspec opens it:
//
//	pubsub://PROJECT[?emulator=HOST:PORT&prefix=PREFIX]
//
// PROJECT is a Google Cloud project ID; with an emulator, from emulator=
// or from PUBSUB_EMULATOR_HOST (read through the Destination's Getenv), it
// is any name. prefix= is Config.TopicPrefix. Credentials never appear in
// the URL: the client takes Application Default Credentials
// (GOOGLE_APPLICATION_CREDENTIALS, gcloud's application default login, the
// metadata server on Google Cloud); an emulator takes none.
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:    "pubsub",
		Schemes: []string{"pubsub"},
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURL(d, urls[0])
		},
	})
}

// emulatorEnv names the emulator's address, as the Pub/Sub client reads
// it; a URL's emulator= wins over it.
const emulatorEnv = "PUBSUB_EMULATOR_HOST"

// projectID is Google Cloud's rule for project IDs. An emulator takes any
// name (gcloud's own examples use short ones such as "p").
var projectID = regexp.MustCompile(`^[a-z][a-z0-9-]{4,28}[a-z0-9]$`)

// URLConfig is a checked pubsub:// destination. Open makes its client.
type URLConfig struct {
	// Emulator is the emulator's HOST:PORT, from emulator= or
	// PUBSUB_EMULATOR_HOST; "" is Google Cloud.
	Emulator string
	// Config is the publisher's: Project is the URL's, TopicPrefix its
	// prefix=.
	Config Config

	d *heraldspec.Destination
}

// ParseURL checks a pubsub:// URL of d (see the package's URL form) and
// the publisher's Config that d.Config gives, and connects to nothing.
func ParseURL(d *heraldspec.Destination, u *url.URL) (*URLConfig, error) {
	c := &URLConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, fmt.Errorf("Config is a %T, not a *heraldpubsub.Config", d.Config)
	}
	project := u.Hostname()
	q := u.Query()
	c.Emulator = d.Env(emulatorEnv)
	emulated := c.Emulator != "" || q.Has("emulator")
	switch {
	case u.User != nil:
		return nil, errors.New("pubsub:// takes no user information: credentials come from Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS)")
	case u.Port() != "":
		return nil, errors.New("pubsub://PROJECT takes no port: give an emulator as ?emulator=HOST:PORT")
	case u.Path != "" && u.Path != "/":
		return nil, errors.New("pubsub://PROJECT takes no path: give a topic prefix as ?prefix=PREFIX")
	case emulated && (project == "" || strings.ContainsAny(project, "/ \t\r\n")):
		return nil, fmt.Errorf("%q is not a project name for the emulator (no '/' or spaces)", heraldspec.Clean(project))
	case !emulated && !projectID.MatchString(project):
		return nil, fmt.Errorf("%q is not a Google Cloud project ID (6 to 30 lower-case letters, digits and hyphens, starting with a letter); "+
			"an emulator takes any name: set %s or add ?emulator=HOST:PORT", heraldspec.Clean(project), emulatorEnv)
	}
	c.Config.Project = project
	for _, name := range slices.Sorted(maps.Keys(q)) {
		v := q[name]
		switch {
		case name != "emulator" && name != "prefix":
			return nil, fmt.Errorf("pubsub:// option %q is not supported: use emulator=HOST:PORT or prefix=PREFIX", heraldspec.Clean(name))
		case len(v) != 1:
			return nil, fmt.Errorf("pubsub:// option %s is given %d times", name, len(v))
		case name == "prefix":
			if err := CheckTopicPrefix(v[0]); err != nil {
				return nil, fmt.Errorf("prefix %w", err)
			}
			c.Config.TopicPrefix = v[0]
		default:
			if _, port, err := net.SplitHostPort(v[0]); err != nil || port == "" {
				return nil, fmt.Errorf("emulator=%q is not HOST:PORT", heraldspec.Clean(v[0]))
			}
			c.Emulator = v[0]
		}
	}
	// New keeps the client without calling it when Config.Project is set:
	// a client that was never connected lets it check the rest of the
	// Config now.
	if _, err := New(&pubsub.Client{}, c.config()); err != nil {
		return nil, errors.New(urlHints.Replace(err.Error()))
	}
	return c, nil
}

// urlHints rewords New's errors for a URL destination, whose prefix= is
// Config.TopicPrefix.
var urlHints = strings.NewReplacer("heraldpubsub: ", "", "Config.TopicPrefix", "prefix=")

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

// Open makes the client (NewClient: Application Default Credentials, or
// the emulator), checks that the service answers (Ping) and returns the
// publisher and what closes it and the client. A service that does not
// answer is Unreachable; credentials it refuses (Unauthenticated), or none
// to be found, are not.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	d := c.d
	var (
		client *pubsub.Client
		err    error
	)
	if c.Emulator != "" {
		client, err = NewClient(ctx, c.Config.Project, EmulatorOptions(c.Emulator)...)
	} else {
		client, err = NewClient(ctx, c.Config.Project)
	}
	if err != nil {
		return nil, nil, heraldspec.Failed(d, false, err, fmt.Sprintf("destination %s: %s (credentials come from Application Default Credentials)",
			d.Name, err.Error()))
	}
	pub, err := New(client, c.config())
	if err != nil {
		_ = client.Close()
		return nil, nil, heraldspec.Failed(d, false, err, "destination "+d.Name+": "+urlHints.Replace(err.Error()))
	}
	closeAll := func() { _ = pub.Close(); _ = client.Close() }
	pctx, cancel := context.WithTimeout(ctx, d.Timeout())
	defer cancel()
	if err := pub.Ping(pctx); err != nil {
		closeAll()
		if status.Code(err) == codes.Unauthenticated {
			return nil, nil, heraldspec.RefusedCredentials(d, err)
		}
		return nil, nil, heraldspec.Unreachable(d, err)
	}
	return pub, closeAll, nil
}
