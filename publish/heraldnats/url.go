package heraldnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// init registers nats://, tls://, ws:// and wss:// with heraldspec: see
// the package documentation's URL form.
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:         "nats",
		Schemes:      []string{"nats", "tls", "ws", "wss"},
		ManyURLs:     true,
		UserIsSecret: userIsToken,
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURLs(d, urls)
		},
	})
}

// userIsToken reports whether the user name of d's URLs is a secret: a
// token (nats://TOKEN@host), unless d's Password secret is set, which
// makes it a user name. A secret that cannot be read counts as unset:
// the name is hidden, and Parse then reports the secret's error.
func userIsToken(d *heraldspec.Destination) bool {
	password, err := d.Secret(heraldspec.Password)
	return err != nil || password == ""
}

// The options of a NATS URL besides the TLS files.
const (
	optCredsFile = "creds_file" // a credentials file: user JWT and nkey seed
	optNkeyFile  = "nkey_file"  // an nkey user seed
)

// urlOptions are every option a NATS URL takes, in the order errors list
// them.
var urlOptions = append([]string{optCredsFile, optNkeyFile}, heraldspec.TLSOptions...)

// maxOptionFile bounds a file a URL option names: a credentials file or
// a seed is a few hundred bytes.
const maxOptionFile = 64 << 10

// reconnectWait is the pause between reconnection attempts, which do not
// stop: a relay keeps its destination for its whole run.
const reconnectWait = 250 * time.Millisecond

// URLConfig is a checked NATS destination: the client's options and the
// publisher's Config. Open connects it.
type URLConfig struct {
	// Options are the NATS client's: the servers (without user
	// information or Herald's options), the credentials, TLS, and
	// reconnecting forever. Open adds the destination's ClientName and
	// ConnectTimeout, and handlers that log the connection's losses and
	// recoveries to its Logger.
	Options nats.Options
	// Config is the publisher's: the destination's Config, or the
	// defaults.
	Config Config

	d    *heraldspec.Destination
	base *Config // d.Config as ParseURLs found it
}

// ParseURLs checks the URLs of one NATS destination d (see the package's
// URL form; a list names the servers of one cluster) and builds the
// client's options: the option files are read, nothing is dialled.
// Errors name the option or the secret that is wrong, never a secret.
func ParseURLs(d *heraldspec.Destination, urls []*url.URL) (*URLConfig, error) {
	if len(urls) == 0 {
		return nil, errors.New("no URL")
	}
	for _, u := range urls {
		if err := checkUserinfoEnd(u); err != nil {
			return nil, err
		}
	}
	c := &URLConfig{d: d, Options: nats.GetDefaultOptions()}
	base, err := baseConfig(d.Config)
	if err != nil {
		return nil, err
	}
	if base != nil {
		c.Config, c.base = *base, base
	}
	opts, err := heraldspec.Options("nats://", urls, urlOptions)
	if err != nil {
		return nil, err
	}
	if err := c.authenticate(urls, opts); err != nil {
		return nil, err
	}
	if heraldspec.HasTLSOption(opts) {
		for _, u := range urls {
			if strings.EqualFold(u.Scheme, "ws") {
				return nil, errors.New("TLS options go with nats://, tls:// or wss://, not ws://")
			}
		}
		// The server name is left to the client, which verifies the host
		// it dials: one name would not fit every server of a list.
		cfg, err := heraldspec.TLSConfig(opts, "")
		if err != nil {
			return nil, err
		}
		c.Options.Secure, c.Options.TLSConfig = true, cfg
	}
	// The client reads a user name without a password as a token, and
	// ignores the query: the credentials went in as options above.
	for _, u := range urls {
		server := *u
		server.User, server.RawQuery, server.ForceQuery = nil, "", false
		c.Options.Servers = append(c.Options.Servers, server.String())
	}
	c.Options.MaxReconnect, c.Options.ReconnectWait = -1, reconnectWait
	return c, nil
}

// checkUserinfoEnd refuses a URL whose user information may have been
// cut short by a '/', '?' or '#' before its '@' (nats://TO#KEN@host parses
// as the host "TO" and the fragment "KEN@host"): the rest of the token
// would be shown as the path, the query or the fragment, which a NATS URL
// does not otherwise take.
func checkUserinfoEnd(u *url.URL) error {
	switch {
	case u.Fragment != "":
		return errors.New("a NATS URL takes no fragment: write a '#' of the user information as %23")
	case u.User == nil && strings.Contains(u.Path+u.RawQuery, "@"):
		return errors.New("the user information holds an '@', '/', '?' or '#' that is not percent-encoded (write '@' as %40, '/' as %2F)")
	}
	return nil
}

// baseConfig is the *Config a Destination's Config holds, nil for none.
func baseConfig(v any) (*Config, error) {
	switch cfg := v.(type) {
	case nil:
		return nil, nil
	case *Config:
		return cfg, nil
	}
	return nil, fmt.Errorf("Config is a %T, not a *heraldnats.Config", v)
}

// authenticate sets the one way c authenticates: a user and password (in
// the URL, or the password from d's secret), a token (the URL's user
// name, or d's Token secret), a credentials file or an nkey seed file.
func (c *URLConfig) authenticate(urls []*url.URL, opts map[string]string) error {
	d := c.d
	user, err := heraldspec.User(urls)
	if err != nil {
		return err
	}
	password, err := d.Secret(heraldspec.Password)
	if err != nil {
		return err
	}
	token, err := d.Secret(heraldspec.Token)
	if err != nil {
		return err
	}
	var ways []string // the ways given, to refuse a second
	use := func(way string, opt nats.Option) error {
		ways = append(ways, way)
		return opt(&c.Options)
	}
	if user != nil {
		urlPassword, hasPassword := user.Password()
		switch {
		case hasPassword && password != "":
			return fmt.Errorf("the URL holds a password and %s is set: give one (the variable keeps it out of the process list)",
				d.SecretWhere(heraldspec.Password))
		case hasPassword:
			err = use("a user and password", nats.UserInfo(user.Username(), urlPassword))
		case password != "":
			err = use("a user and password", nats.UserInfo(user.Username(), password))
		default: // nats://TOKEN@host
			err = use("a token in the URL", nats.Token(user.Username()))
		}
		if err != nil {
			return err
		}
	} else if password != "" {
		return fmt.Errorf("%s is set but the URL names no user: nats://USER@HOST:PORT", d.SecretWhere(heraldspec.Password))
	}
	if token != "" {
		if err := use(d.SecretWhere(heraldspec.Token), nats.Token(token)); err != nil {
			return err
		}
	}
	if path := opts[optCredsFile]; path != "" {
		if err := checkCredsFile(d, path); err != nil {
			return err
		}
		// The client reads the file again at each connection, so that a
		// renewed file is taken.
		if err := use(optCredsFile, nats.UserCredentials(path)); err != nil {
			return err
		}
	}
	if path := opts[optNkeyFile]; path != "" {
		opt, err := nkeyOption(d, path)
		if err != nil {
			return err
		}
		if err := use(optNkeyFile, opt); err != nil {
			return err
		}
	}
	if len(ways) > 1 {
		return fmt.Errorf("give one way to authenticate, not %s", strings.Join(ways, " and "))
	}
	return nil
}

// readOptionFile reads the file a URL option names, refusing it with its
// path, never its content.
func readOptionFile(opt, path string) ([]byte, error) {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s=%s: cannot read it: %v", opt, heraldspec.Clean(path), heraldspec.PathReason(err))
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("%s=%s is not a file", opt, heraldspec.Clean(path))
	case st.Size() > maxOptionFile:
		return nil, fmt.Errorf("%s=%s holds %d bytes: not a credentials file", opt, heraldspec.Clean(path), st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: cannot read it: %v", opt, heraldspec.Clean(path), heraldspec.PathReason(err))
	}
	return b, nil
}

// checkCredsFile checks that a credentials file holds a user JWT and an
// nkey seed, so that a wrong file is refused before the relay waits for
// the server.
func checkCredsFile(d *heraldspec.Destination, path string) error {
	b, err := readOptionFile(optCredsFile, path)
	if err != nil {
		return err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return fmt.Errorf("%s=%s: no nkey seed in the file (a .creds file, as nsc writes it)", optCredsFile, heraldspec.Clean(path))
	}
	noteSeed(d, kp)
	token, err := nkeys.ParseDecoratedJWT(b)
	if err != nil {
		return fmt.Errorf("%s=%s: no user JWT in the file (a .creds file, as nsc writes it)", optCredsFile, heraldspec.Clean(path))
	}
	if _, err := jwt.DecodeUserClaims(token); err != nil {
		return fmt.Errorf("%s=%s: the file's JWT is not a user's (a .creds file, as nsc writes it)", optCredsFile, heraldspec.Clean(path))
	}
	return nil
}

// noteSeed tells d's OnSecret of the seed of kp, then wipes kp.
func noteSeed(d *heraldspec.Destination, kp nkeys.KeyPair) {
	if seed, err := kp.Seed(); err == nil {
		d.NoteSecret(string(seed))
	}
	kp.Wipe()
}

// nkeyOption checks an nkey seed file and returns the client's option,
// which signs the server's challenge with it.
func nkeyOption(d *heraldspec.Destination, path string) (nats.Option, error) {
	b, err := readOptionFile(optNkeyFile, path)
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: no nkey seed in the file (a user seed, SU...)", optNkeyFile, heraldspec.Clean(path))
	}
	noteSeed(d, kp)
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: not an nkey user seed (SU...)", optNkeyFile, heraldspec.Clean(path))
	}
	return opt, nil
}

// config is the publisher's Config for Open: c.Config, unless the
// destination's Config was set since ParseURLs (heraldspec.Parsed lets a
// caller set it before Open).
func (c *URLConfig) config() (Config, error) {
	cfg := c.Config
	base, err := baseConfig(c.d.Config)
	if err != nil {
		return cfg, err
	}
	if base != nil && base != c.base {
		cfg = *base
	}
	if c.d.Logger != nil || cfg.Logger == nil {
		cfg.Logger = c.d.Log()
	}
	if c.d.CloudEvents != nil {
		cfg.CloudEvents = c.d.CloudEvents
	}
	return cfg, nil
}

// credentialErrors are the server's answers that refuse the connection's
// credentials.
var credentialErrors = []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired}

// Open connects to the servers, and returns the publisher and what closes
// the connection. A server that refuses the credentials or the TLS setup
// is an *heraldspec.OpenError that is not Unreachable; one that cannot be
// reached, one that is.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	cfg, err := c.config()
	if err != nil {
		return nil, nil, heraldspec.Failed(c.d, false, err, "destination "+c.d.Name+": "+err.Error())
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, heraldspec.Unreachable(c.d, err)
	}
	nc, closeConn, err := c.connect()
	if err != nil {
		return nil, nil, c.refusal(err)
	}
	pub, err := New(nc, &cfg)
	if err != nil {
		closeConn()
		return nil, nil, heraldspec.Failed(c.d, false, err, "destination "+c.d.Name+": "+err.Error())
	}
	return pub, closeConn, nil
}

// refusal is the *heraldspec.OpenError of a connection that failed.
func (c *URLConfig) refusal(err error) *heraldspec.OpenError {
	refused := slices.ContainsFunc(credentialErrors, func(e error) bool { return errors.Is(err, e) })
	if oe := heraldspec.ClassifyRefusal(c.d, err, refused); oe != nil {
		return oe
	}
	switch {
	case errors.Is(err, nats.ErrSecureConnRequired):
		return heraldspec.Refused(c.d, err, " requires TLS: use tls:// or give %s=", heraldspec.OptCAFile)
	case errors.Is(err, nats.ErrSecureConnWanted):
		return heraldspec.Refused(c.d, err, " does not offer TLS, which its URL asks for")
	}
	return heraldspec.Unreachable(c.d, err)
}

// connect connects with c's options, the destination's client name and
// timeout, and handlers that log the connection's ups and downs. Call the
// returned close instead of the connection's Close: the client runs its
// handlers on a goroutine of its own, and close makes sure none logs once
// it returned.
func (c *URLConfig) connect() (*nats.Conn, func(), error) {
	opts := c.Options
	opts.Name, opts.Timeout = c.d.Client(), c.d.Timeout()
	clog := &connLog{log: c.d.Log().With("component", "nats")}
	disconnected, reconnected, asyncErr := opts.DisconnectedErrCB, opts.ReconnectedCB, opts.AsyncErrorCB
	opts.DisconnectedErrCB = func(nc *nats.Conn, err error) {
		if err != nil {
			clog.print(slog.LevelWarn, "disconnected from NATS; reconnecting", "error", herald.Scrub(err.Error()))
		}
		if disconnected != nil {
			disconnected(nc, err)
		}
	}
	opts.ReconnectedCB = func(nc *nats.Conn) {
		clog.print(slog.LevelInfo, "reconnected to NATS", "server", nc.ConnectedUrlRedacted())
		if reconnected != nil {
			reconnected(nc)
		}
	}
	opts.AsyncErrorCB = func(nc *nats.Conn, sub *nats.Subscription, err error) {
		clog.print(slog.LevelWarn, "NATS error", "error", herald.Scrub(err.Error()))
		if asyncErr != nil {
			asyncErr(nc, sub, err)
		}
	}
	nc, err := opts.Connect()
	if err != nil {
		clog.close()
		return nil, nil, err
	}
	return nc, func() { nc.Close(); clog.close() }, nil
}

// connLog is the client's handlers' logger, silent once closed.
type connLog struct {
	mu     sync.Mutex
	closed bool
	log    *slog.Logger
}

func (l *connLog) print(level slog.Level, msg string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.log.Log(context.Background(), level, msg, args...)
	}
}

func (l *connLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}
