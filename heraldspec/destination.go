package heraldspec

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldce"
	"github.com/herald-outbox/herald/internal/textsafe"
)

// Destination is one destination as a spec gives it.
type Destination struct {
	// Name names the destination in errors and logs. Required: a lower-case
	// letter, then up to 39 lower-case letters, digits, '-' and '_'.
	Name string
	// URL is the destination's URL, whose scheme picks the publisher
	// package; brokers with several servers (NATS, Kafka) take a
	// comma-separated list. Required.
	URL string
	// Secrets gives the secrets the URL leaves out: a password, a token, a
	// webhook's signing secret. Defaults to none.
	Secrets Secrets
	// Getenv reads the environment that a broker's client reads by
	// convention (AWS_REGION, PUBSUB_EMULATOR_HOST). Defaults to
	// os.LookupEnv.
	Getenv func(name string) (string, bool)
	// Logger receives the publisher's and its client's logs. Defaults to
	// slog.Default().
	Logger *slog.Logger
	// CloudEvents, when set, sends every event as a CloudEvent. Defaults
	// to off.
	CloudEvents *heraldce.Config
	// ClientName names the connection on brokers that show it (NATS,
	// RabbitMQ). Defaults to "herald".
	ClientName string
	// ConnectTimeout bounds reaching the broker in Open. Defaults to 5s.
	ConnectTimeout time.Duration
	// OnSecret, when set, is called with each secret the publisher
	// package reads on its own, beyond Secrets and the URL (the nkey seed
	// of a NATS credentials file), so that a program that redacts its
	// output can register it. Defaults to nil.
	OnSecret func(secret string)
	// Config is the publisher's Config to start from, for settings a URL
	// does not carry (a *heraldnats.Config for a nats:// URL); what the URL
	// sets overrides it. A Config of another publisher's type is refused.
	// Defaults to the publisher's defaults.
	Config any

	display string
	hosts   []string
}

// Display is the destination's URL list without its secrets, for logs
// and errors. It is set by Parse.
func (d *Destination) Display() string { return d.display }

// Hosts are the host:port of each URL, in order. It is set by Parse.
func (d *Destination) Hosts() []string { return d.hosts }

// Log is d's logger, or slog.Default().
func (d *Destination) Log() *slog.Logger {
	if d.Logger != nil {
		return d.Logger
	}
	return slog.Default()
}

// Env reads one variable through d.Getenv.
func (d *Destination) Env(name string) string {
	get := d.Getenv
	if get == nil {
		get = os.LookupEnv
	}
	v, _ := get(name)
	return v
}

// Secret reads one of d's secrets; "" when d has no Secrets or the secret
// is not set.
func (d *Destination) Secret(what string) (string, error) {
	if d.Secrets == nil {
		return "", nil
	}
	return d.Secrets.Secret(what)
}

// NoteSecret tells d.OnSecret of a secret the publisher package read.
func (d *Destination) NoteSecret(secret string) {
	if d.OnSecret != nil && secret != "" {
		d.OnSecret(secret)
	}
}

// SecretWhere names where d's secret is set, for messages.
func (d *Destination) SecretWhere(what string) string {
	if d.Secrets == nil {
		return "the destination's " + what + " secret"
	}
	return d.Secrets.Where(what)
}

// Timeout is d.ConnectTimeout or its default.
func (d *Destination) Timeout() time.Duration {
	if d.ConnectTimeout > 0 {
		return d.ConnectTimeout
	}
	return 5 * time.Second
}

// Client is d.ClientName or its default.
func (d *Destination) Client() string {
	if d.ClientName != "" {
		return d.ClientName
	}
	return "herald"
}

// The secrets a destination may ask of its Secrets.
const (
	Password       = "PASSWORD"        // a broker's password
	Token          = "TOKEN"           // a broker's token (NATS)
	Secret         = "SECRET"          // a webhook's signing secret
	PreviousSecret = "PREVIOUS_SECRET" // a webhook's retiring signing secret
)

// SecretNames are every secret a destination may ask for.
var SecretNames = []string{Password, Token, Secret, PreviousSecret}

// Secrets gives a destination's secrets.
type Secrets interface {
	// Secret returns the secret what (Password, Token, ...), "" when it is
	// not set. An error is one reading it (an unreadable file).
	Secret(what string) (string, error)
	// Where names where the secret what is set, for messages: an
	// environment variable, a file.
	Where(what string) string
}

// EnvSecrets reads each secret from the variable prefix+WHAT
// (HERALD_ORDERS_PASSWORD), or from the file its _FILE twin names, through
// getenv (os.LookupEnv when nil). A file's one trailing newline is not part
// of the secret.
func EnvSecrets(prefix string, getenv func(string) (string, bool)) Secrets {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	return envSecrets{prefix: prefix, getenv: getenv}
}

type envSecrets struct {
	prefix string
	getenv func(string) (string, bool)
}

func (e envSecrets) Where(what string) string { return e.prefix + what }

func (e envSecrets) Secret(what string) (string, error) {
	name := e.prefix + what
	if v, ok := e.getenv(name); ok && v != "" {
		return v, nil
	}
	path, ok := e.getenv(name + "_FILE")
	if !ok || path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s_FILE names %s, which cannot be read: %v", name, Clean(path), PathReason(err))
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", fmt.Errorf("%s_FILE names %s, which is empty", name, Clean(path))
	}
	return v, nil
}

// Scheme is what a publisher package registers: the URL schemes it takes
// and how it parses them.
type Scheme struct {
	// Kind names the publisher: "nats", "kafka", ... It is said in errors.
	Kind string
	// Schemes are the URL schemes, lower-case: "redis", "rediss".
	Schemes []string
	// ManyURLs says the destination takes a comma-separated list of URLs
	// (the servers of one cluster).
	ManyURLs bool
	// OwnClaimChecks says the package reads the claim_* options of its
	// URLs itself (sqs, sns); otherwise Parse takes them (see ClaimCheck).
	OwnClaimChecks bool
	// UserIsSecret reports whether a URL's user name without a password
	// is a secret (a NATS token: nats://TOKEN@host), so that Display
	// hides it. Nil: a user name is not a secret.
	UserIsSecret func(d *Destination) bool
	// Parse checks the destination's URLs, reading the files its options
	// name and its secrets but connecting to nothing, and returns what
	// opens it. Its errors say what is wrong without the destination's
	// name, which Parse adds.
	Parse func(d *Destination, urls []*url.URL) (Target, error)
}

// Target is a parsed destination, ready to open.
type Target interface {
	// Open connects to the broker and returns the publisher and what
	// closes it (the publisher and the client it owns). A failure is an
	// *OpenError.
	Open(ctx context.Context) (herald.Publisher, func(), error)
}

var registry = struct {
	sync.RWMutex
	byScheme map[string]*Scheme
	kinds    []string
}{byScheme: map[string]*Scheme{}}

// Register makes s's schemes open through s. Publisher packages call it
// from init. It panics when a scheme is registered twice or s is
// incomplete: a program that links two publishers for one scheme is
// wrong from its start.
func Register(s Scheme) {
	if s.Kind == "" || len(s.Schemes) == 0 || s.Parse == nil {
		panic("heraldspec: Register needs a Kind, Schemes and Parse")
	}
	registry.Lock()
	defer registry.Unlock()
	for _, name := range s.Schemes {
		if _, dup := registry.byScheme[name]; dup {
			panic("heraldspec: scheme " + name + ":// is registered twice")
		}
		registry.byScheme[name] = &s
	}
	registry.kinds = append(registry.kinds, s.Kind)
}

// Lookup returns the registered Scheme of a URL scheme.
func Lookup(scheme string) (Scheme, bool) {
	registry.RLock()
	defer registry.RUnlock()
	s, ok := registry.byScheme[strings.ToLower(scheme)]
	if !ok {
		return Scheme{}, false
	}
	return *s, true
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registry.RLock()
	defer registry.RUnlock()
	var out []string
	for name := range registry.byScheme {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// NamePattern is the rule for a destination's Name.
var NamePattern = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,39}$`)

// Parsed is a checked destination. The settings that do not change what
// Parse checks (Logger, CloudEvents, ClientName, ConnectTimeout, Config)
// may still be set on it before Open.
type Parsed struct {
	*Destination
	// Kind is the Scheme's Kind.
	Kind   string
	target Target
	claim  *ClaimCheck
}

// ClaimCheck is the claim check the URL's claim_* options set, nil when
// none (or when the publisher package reads them itself).
func (p *Parsed) ClaimCheck() *ClaimCheck { return p.claim }

// Target is what the publisher package parsed: its own type (a
// *heraldredis.URLConfig), for a caller that wants to look.
func (p *Parsed) Target() Target { return p.target }

// Open connects the destination: see Target.
func (p *Parsed) Open(ctx context.Context) (herald.Publisher, func(), error) {
	if p.claim != nil {
		return (&claimTarget{Target: p.target, d: p.Destination, c: p.claim}).Open(ctx)
	}
	return p.target.Open(ctx)
}

// Open parses d and opens it.
func Open(ctx context.Context, d Destination) (herald.Publisher, func(), error) {
	p, err := Parse(d)
	if err != nil {
		return nil, nil, err
	}
	return p.Open(ctx)
}

// Parse checks d: its name, its URLs (a registered scheme, a host, a
// port), then what the scheme's package checks. Errors are *Error.
func Parse(d Destination) (*Parsed, error) {
	fail := func(err error) (*Parsed, error) { return nil, &Error{Destination: d.Name, Err: err} }
	if !NamePattern.MatchString(d.Name) {
		return nil, &Error{Destination: Clean(d.Name), Err: fmt.Errorf("name %q must match %s", Clean(d.Name), NamePattern)}
	}
	raw := strings.TrimSpace(d.URL)
	if raw == "" {
		return fail(errors.New("no URL"))
	}
	var (
		scheme *Scheme
		urls   []*url.URL
		shown  []string
	)
	for _, one := range strings.Split(raw, ",") {
		u, err := ParseURL(strings.TrimSpace(one))
		if err != nil {
			return fail(err)
		}
		s, ok := Lookup(u.Scheme)
		switch {
		case u.Scheme == "":
			// A URL without a scheme may hold a secret where Redact does not
			// look (nats//u:pw@h, or one after a '#', which prints
			// percent-encoded): quote only one that holds neither '@' nor '#'.
			shown := "the URL"
			if !strings.ContainsAny(one, "@#") {
				shown = Redact(u, true)
			}
			return fail(&SchemeError{URL: shown})
		case !ok:
			return fail(&SchemeError{Scheme: Clean(u.Scheme)})
		case scheme != nil && scheme.Kind != s.Kind:
			return fail(fmt.Errorf("one destination takes URLs of one broker; give another destination for %s", strings.ToLower(u.Scheme)))
		case u.Hostname() == "":
			return fail(fmt.Errorf("%s has no host", Redact(u, false)))
		}
		scheme = &s
		urls = append(urls, u)
		d.hosts = append(d.hosts, u.Host)
	}
	if len(urls) > 1 && !scheme.ManyURLs {
		return fail(fmt.Errorf("a %s destination takes one URL", scheme.Kind))
	}
	var claim *ClaimCheck
	if !scheme.OwnClaimChecks {
		c, err := takeClaimCheck(urls)
		if err != nil {
			return fail(err)
		}
		claim = c
	}
	userIsSecret := scheme.UserIsSecret != nil && scheme.UserIsSecret(&d)
	for _, u := range urls {
		if scheme.Kind == "webhook" {
			// A webhook URL's path or query is often its credential
			// (hooks.example.com/services/T0/B0/XXXX): show the origin.
			shown = append(shown, u.Scheme+"://"+u.Host)
			continue
		}
		shown = append(shown, Redact(u, userIsSecret))
	}
	d.display = strings.Join(shown, ",")
	dp := &d
	t, err := scheme.Parse(dp, urls)
	if err != nil {
		return fail(err)
	}
	return &Parsed{Destination: dp, Kind: scheme.Kind, target: t, claim: claim}, nil
}

// ParseURL parses one URL, refusing what would show a secret in an error
// or a display: a URL that does not parse (its error would quote it), user
// information with an '@', '/', '?' or '#' that is not percent-encoded
// (the rest of the password would read as the host or the path), and a
// port that is not a number from 1 to 65535. Errors quote no part of the
// URL that may hold a secret.
func ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// The error quotes the URL, or a piece of it that may be part of a
		// password (the "port" of nats://u:pa/ss@host): give the reason
		// only, and only when it quotes nothing.
		reason := "not a URL"
		var ue *url.Error
		if errors.As(err, &ue) && !strings.Contains(ue.Err.Error(), `"`) {
			reason += ": " + ue.Err.Error()
		}
		return nil, errors.New(reason)
	}
	if ambiguousUserinfo(raw, u) {
		return nil, errors.New("the user information holds an '@', '/', '?' or '#' that is not percent-encoded (write '@' as %40, '/' as %2F)")
	}
	if p := u.Port(); p != "" {
		var n int
		if _, err := fmt.Sscanf(p, "%d", &n); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("port %q is not a port number", p)
		}
	}
	return u, nil
}

// ambiguousUserinfo reports whether u, parsed from raw, took another
// password (or token) than UserinfoSecrets finds in raw, which ends the
// user information at its last '@'.
func ambiguousUserinfo(raw string, u *url.URL) bool {
	found := UserinfoSecrets(raw, true)
	if u.User == nil {
		// What reads as user information in raw went to the fragment
		// (nats://to#ken@host), which would be printed: an '@' before any
		// path or query. One after them is the path's or the query's own
		// (https://hooks.example/x?email=a@b).
		_, rest, _ := strings.Cut(raw, "://")
		if i := strings.IndexAny(rest, "/?"); i >= 0 {
			rest = rest[:i]
		}
		return strings.Contains(rest, "@")
	}
	if len(found) != 1 {
		return true
	}
	secret, err := url.PathUnescape(found[0])
	if err != nil {
		return true
	}
	want, has := u.User.Password()
	if !has {
		want = u.User.Username()
	}
	return secret != want
}

// UserinfoSecrets returns the secrets in the user information of a URL,
// parseable or not, as written: the password, and the user name too when
// userIsSecret and there is no password (a token: nats://TOKEN@host). A
// program that redacts its output registers them before parsing.
func UserinfoSecrets(raw string, userIsSecret bool) []string {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	// The user information ends at the last '@' before the path; a
	// password may itself hold '@' or ':'.
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		if at := strings.LastIndex(rest, "@"); at < i {
			rest = rest[:i]
		}
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return nil
	}
	user, password, hasPassword := strings.Cut(rest[:at], ":")
	switch {
	case hasPassword:
		return []string{password}
	case userIsSecret:
		return []string{user}
	}
	return nil
}

// Redacted replaces a secret in Redact's output.
const Redacted = "xxxxx"

// Redact returns u as text with its password, or its user name when
// userIsSecret and there is no password, replaced by Redacted.
func Redact(u *url.URL, userIsSecret bool) string {
	c := *u
	// A fragment is never sent to a broker; one may hold the rest of a
	// secret written with a bare '#'.
	c.Fragment, c.RawFragment = "", ""
	if c.User != nil {
		if _, has := c.User.Password(); has {
			c.User = url.UserPassword(c.User.Username(), Redacted)
		} else if userIsSecret {
			c.User = url.User(Redacted)
		}
	}
	return c.String()
}

// Clean makes text taken from a spec safe to quote on one line: control
// characters and broken UTF-8 become visible escapes.
func Clean(s string) string { return textsafe.Line(s) }

// PathReason is the reason of a file error without the path, which the
// caller already says.
func PathReason(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
