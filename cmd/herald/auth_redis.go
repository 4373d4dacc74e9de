package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/publish/heraldredis"
)

// redisHeraldOptions are the options of a redis(s):// URL that Herald
// reads itself and takes out before the client parses the URL: the
// streams' length bound, and the TLS files (rediss:// only).
var redisHeraldOptions = []string{"maxlen", optCAFile, optCertFile, optKeyFile}

// redisClientOptions are the go-redis URL options the daemon passes on to
// the client (redis.ParseURL): the database, the client's name, timeouts
// and the pool. The others it knows are left out on purpose: skip_verify
// would turn certificate checks off (trust a private CA with ca_file=
// instead), and the pipeline and lifetime-jitter settings are tuning
// Herald does not need.
var redisClientOptions = []string{"db", "protocol", "client_name", "dial_timeout", "read_timeout", "write_timeout",
	"pool_size", "pool_timeout", "min_idle_conns", "max_idle_conns", "max_active_conns",
	"conn_max_idle_time", "conn_max_lifetime", "max_retries", "min_retry_backoff", "max_retry_backoff"}

// redisOptions are a redis(s):// URL's options. skip_verify would turn the
// server's certificate check off: refused.
var redisOptions = clientOptions{shown: "a redis(s)://", tlsShown: "rediss://", herald: redisHeraldOptions, client: redisClientOptions,
	refused: map[string]string{"skip_verify": "option skip_verify is refused: Herald verifies the server's certificate; trust a private CA with " + optCAFile + "="}}

// redisDest is a checked redis(s):// destination.
type redisDest struct {
	opts   *redis.Options
	maxLen int64
}

// redisDestination checks a redis(s):// URL,
// redis[s]://[user[:password]@]host[:port][/db][?options], and builds the
// client's options: the password from the URL or from the destination's
// PASSWORD variable (not both), the TLS files read. It reads files but
// connects to nothing, so parseEndpoint calls it before the relay waits
// for its database. label names the flag or variable in errors.
func redisDestination(inv *invocation, label string, ep endpoint, u *url.URL) (redisDest, error) {
	var d redisDest
	fail := func(format string, args ...any) (redisDest, error) {
		return d, usagef("%s: "+format, append([]any{label}, args...)...)
	}
	tlsScheme := strings.EqualFold(u.Scheme, "rediss")
	q := u.Query()
	if err := redisOptions.check(q); err != nil {
		return fail("%s", err)
	}
	files := tlsFiles{ca: q.Get(optCAFile), cert: q.Get(optCertFile), key: q.Get(optKeyFile)}
	if files.any() && !tlsScheme {
		return fail("%s, %s and %s are for rediss:// (TLS) only", optCAFile, optCertFile, optKeyFile)
	}
	if v := q.Get("maxlen"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return fail("maxlen=%q is not a positive number", clean(v))
		}
		d.maxLen = n
	}
	// The client refuses options it does not know: give it its own.
	opts, err := redis.ParseURL(redisOptions.forClient(u))
	if err != nil {
		return fail("%s", strings.TrimPrefix(inv.stderr.scrub(err.Error()), "redis: "))
	}
	envName, password, err := inv.destinationSecret(ep, "PASSWORD")
	if err != nil {
		return d, err
	}
	if password != "" {
		if _, inURL := u.User.Password(); inURL {
			return fail("the URL holds a password and %s is set; give one", envName)
		}
		opts.Password = password
	}
	if tlsScheme {
		cfg, err := files.config(u.Hostname())
		if err != nil {
			return fail("%v", err)
		}
		opts.TLSConfig = cfg
	}
	d.opts = opts
	return d, nil
}

// openRedis connects a redis(s):// destination's publisher.
func openRedis(ctx context.Context, inv *invocation, log *slog.Logger, ep endpoint,
	unreachable func(error) error) (herald.Publisher, func(), error) {
	label := "destination " + ep.name
	u, err := url.Parse(ep.raw)
	if err != nil {
		return nil, nil, usagef("%s: not a URL", label)
	}
	d, err := redisDestination(inv, label, ep, u)
	if err != nil {
		return nil, nil, err
	}
	rdb := redis.NewClient(d.opts)
	pctx, cancel := context.WithTimeout(ctx, brokerConnectTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		if cause := tlsCause(err); cause != nil {
			return nil, nil, tlsHandshakeFailed(inv, ep, cause)
		}
		return nil, nil, unreachable(err)
	}
	pub, err := heraldredis.New(rdb, &heraldredis.Config{MaxLen: d.maxLen, Logger: log, CloudEvents: ep.ce})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("%s: %w", label, err)
	}
	return pub, func() { _ = rdb.Close() }, nil
}
