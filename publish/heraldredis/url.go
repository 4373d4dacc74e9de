package heraldredis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// A redis(s):// destination, as heraldspec opens it:
//
//	redis[s]://[user[:password]@]host[:port][/db][?options]
//
// Herald's options: maxlen (Config.MaxLen) and, for rediss:// only, the
// TLS files ca_file, cert_file and key_file. The client's options, which
// go-redis parses (redis.ParseURL): db, protocol, client_name, the
// timeouts, the pool and the retries. skip_verify is refused: Herald
// verifies the server's certificate (trust a private CA with ca_file=).
// The password may come from the destination's Password secret instead
// of the URL, not from both.
func init() {
	heraldspec.Register(heraldspec.Scheme{
		Kind:    "redis",
		Schemes: []string{"redis", "rediss"},
		Parse: func(d *heraldspec.Destination, urls []*url.URL) (heraldspec.Target, error) {
			return ParseURL(d, urls[0])
		},
	})
}

// urlOptions are a redis(s):// URL's options: Herald's, which it takes
// out before the client parses the URL, and the client's. The client's
// others are left out on purpose: skip_verify would turn certificate
// checks off, and the pipeline and lifetime-jitter settings are tuning
// Herald does not need.
var urlOptions = heraldspec.ClientOptions{
	Shown: "a redis(s)://", TLSShown: "rediss://",
	Herald: append([]string{"maxlen"}, heraldspec.TLSOptions...),
	Client: []string{"db", "protocol", "client_name", "dial_timeout", "read_timeout", "write_timeout",
		"pool_size", "pool_timeout", "min_idle_conns", "max_idle_conns", "max_active_conns",
		"conn_max_idle_time", "conn_max_lifetime", "max_retries", "min_retry_backoff", "max_retry_backoff"},
	Refused: map[string]string{"skip_verify": "option skip_verify is refused: Herald verifies the server's certificate; " +
		"trust a private CA with " + heraldspec.OptCAFile + "="},
}

// URLConfig is a checked redis(s):// destination: the client's options
// and the publisher's Config. Open connects it.
type URLConfig struct {
	// Options are the client's options, TLS and password included.
	Options *redis.Options
	// Config is the publisher's.
	Config Config

	d *heraldspec.Destination
}

// ParseURL checks a redis(s):// URL of d (see the package's URL form) and
// builds the client's options: the TLS files are read, nothing is dialled.
// Errors name the option that is wrong, never a secret.
func ParseURL(d *heraldspec.Destination, u *url.URL) (*URLConfig, error) {
	c := &URLConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, fmt.Errorf("Config is a %T, not a *heraldredis.Config", d.Config)
	}
	tlsScheme := strings.EqualFold(u.Scheme, "rediss")
	q := u.Query()
	if err := urlOptions.Check(q); err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, opt := range heraldspec.TLSOptions {
		files[opt] = q.Get(opt)
	}
	if heraldspec.HasTLSOption(files) && !tlsScheme {
		return nil, fmt.Errorf("%s, %s and %s are for rediss:// (TLS) only", heraldspec.OptCAFile, heraldspec.OptCertFile, heraldspec.OptKeyFile)
	}
	if v := q.Get("maxlen"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("maxlen=%q is not a positive number", heraldspec.Clean(v))
		}
		c.Config.MaxLen = n
	}
	// The client refuses options it does not know: give it its own.
	opts, err := redis.ParseURL(urlOptions.ForClient(u))
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "redis: ")
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, heraldspec.Redacted)
		}
		return nil, errors.New(herald.Scrub(msg))
	}
	password, err := d.Secret(heraldspec.Password)
	if err != nil {
		return nil, err
	}
	if password != "" {
		if _, inURL := u.User.Password(); inURL {
			return nil, fmt.Errorf("the URL holds a password and %s is set; give one", d.SecretWhere(heraldspec.Password))
		}
		opts.Password = password
	}
	if tlsScheme {
		if opts.TLSConfig, err = heraldspec.TLSConfig(files, u.Hostname()); err != nil {
			return nil, err
		}
	}
	c.Options = opts
	return c, nil
}

// Open connects the client, checks that the server answers, and returns
// the publisher and what closes the client.
func (c *URLConfig) Open(ctx context.Context) (herald.Publisher, func(), error) {
	rdb := redis.NewClient(c.Options)
	pctx, cancel := context.WithTimeout(ctx, c.d.Timeout())
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		if cause := heraldspec.TLSCause(err); cause != nil {
			return nil, nil, heraldspec.TLSHandshakeFailed(c.d, cause)
		}
		if redis.HasErrorPrefix(err, "WRONGPASS") || redis.HasErrorPrefix(err, "NOAUTH") {
			return nil, nil, heraldspec.RefusedCredentials(c.d, err)
		}
		return nil, nil, heraldspec.Unreachable(c.d, err)
	}
	cfg := c.Config
	cfg.Logger, cfg.CloudEvents = c.d.Log(), c.d.CloudEvents
	pub, err := New(rdb, &cfg)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, heraldspec.Failed(c.d, false, err, "destination "+c.d.Name+": "+err.Error())
	}
	return pub, func() { _ = rdb.Close() }, nil
}
