package heraldpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// init makes heraldspec open this package's DSNs (see ParseDSN).
func init() {
	heraldspec.RegisterDatabase(heraldspec.DatabaseDriver{
		Name:        "postgres",
		Schemes:     []string{"postgres", "postgresql"},
		Keywords:    libpqKeywords,
		Secrets:     dsnSecrets,
		Unreachable: unreachable,
		Parse: func(d *heraldspec.Database) (heraldspec.DatabaseTarget, error) {
			return ParseDSN(d)
		},
	})
}

// libpqKeywords are libpq's connection keywords, the first of which is
// said in messages (a host=... connection string).
var libpqKeywords = []string{
	"host", "hostaddr", "port", "dbname", "user", "password", "passfile",
	"sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "connect_timeout",
	"application_name", "options", "service", "target_session_attrs", "krbsrvname",
}

// keywordPassword finds the password of a keyword/value DSN, quoted or
// not.
var keywordPassword = regexp.MustCompile(`(?:^|\s)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// dsnSecrets returns the passwords a DSN holds as written: a URL's user
// information and password= option, or a keyword/value password.
func dsnSecrets(dsn string) []string {
	if _, rest, isURL := strings.Cut(dsn, "://"); isURL {
		out := heraldspec.UserinfoSecrets(dsn, false)
		if _, query, ok := strings.Cut(rest, "?"); ok {
			if q, err := url.ParseQuery(query); err == nil && q.Get("password") != "" {
				out = append(out, q.Get("password"))
			}
		}
		return out
	}
	var out []string
	for _, m := range keywordPassword.FindAllStringSubmatch(dsn, -1) {
		quoted := strings.Trim(m[1], "'")
		out = append(out, quoted, strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(quoted))
	}
	return out
}

// DSNConfig is a checked PostgreSQL database: the pool's configuration
// and the driver's Config. Open connects it.
type DSNConfig struct {
	// Pool is pgx's pool configuration, password included.
	Pool *pgxpool.Config
	// Config is the driver's: the outbox table's names and modes. It may
	// still be changed before Open.
	Config Config

	d *heraldspec.Database
}

// ParseDSN checks a PostgreSQL DSN of d (the DSN form below) and
// the outbox table's names, without connecting. Errors name the part
// that is wrong, never the password.
//
// The DSN form: any DSN pgx takes,
//
//	postgres[ql]://[user[:password]@]host[:port]/dbname[?param=value...]
//	host=... port=... user=... password=... dbname=... [param=value...]
//
// pgx's own settings (sslmode, connect_timeout, pool_max_conns, ...) are
// pgx's, checked by it; a password it reads from a password file is a
// secret like the DSN's. In a URL, an '@' or '/' of the password must be
// percent-encoded (%40, %2F): unencoded, the rest of the password would
// be read as the host or the database, and shown where those are.
// heraldspec.Database's Schema and Table name the outbox table; its
// Config may be a *Config (ClaimRows, Partition).
func ParseDSN(d *heraldspec.Database) (*DSNConfig, error) {
	c := &DSNConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, &heraldspec.DatabaseError{Field: "Config", Err: fmt.Errorf("a %T, not a *heraldpg.Config", d.Config)}
	}
	raw := d.DSN
	if scheme, rest, isURL := strings.Cut(raw, "://"); isURL {
		// pgx, like libpq, ends the user information at its first '@',
		// and sees none when a '/' comes first: the rest of a password
		// holding a bare '@' or '/' (user:p@ss@host, user:pa/ss@host)
		// would be read as the host or the database, and shown wherever
		// those are.
		if pw := heraldspec.UserinfoSecrets(raw, false); len(pw) == 1 && strings.ContainsAny(pw[0], "@/") {
			return nil, errors.New("the password holds an '@' or '/' that is not percent-encoded: write them %40 and %2F")
		}
		// pgx takes the scheme in lower case only.
		raw = strings.ToLower(scheme) + "://" + rest
	}
	cfg, err := pgxpool.ParseConfig(raw)
	if err != nil {
		msg := err.Error()
		for _, secret := range dsnSecrets(d.DSN) {
			if secret != "" {
				msg = strings.ReplaceAll(msg, secret, heraldspec.Redacted)
			}
		}
		return nil, errors.New(herald.Scrub(msg))
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = d.Application()
	}
	if d.MaxConns > 0 && !strings.Contains(raw, "pool_max_conns") {
		cfg.MaxConns = int32(min(d.MaxConns, 1<<30))
	}
	c.Pool = cfg
	if d.Schema != "" {
		c.Config.Schema = d.Schema
	}
	if d.Table != "" {
		c.Config.Table = d.Table
	}
	if err := c.Config.Validate(); err != nil {
		return nil, configError(d, "heraldpg: ", err)
	}
	return c, nil
}

// configError is a Config.Validate error as a *heraldspec.DatabaseError:
// about Schema or Table when d set them, otherwise about d.Config.
func configError(d *heraldspec.Database, pkg string, err error) error {
	msg := strings.TrimPrefix(err.Error(), pkg)
	for field, set := range map[string]bool{"Schema": d.Schema != "", "Table": d.Table != ""} {
		if rest, ok := strings.CutPrefix(msg, "Config."+field+" "); ok && set {
			return &heraldspec.DatabaseError{Field: field, Err: errors.New(rest)}
		}
	}
	return &heraldspec.DatabaseError{Field: "Config", Err: errors.New(msg)}
}

// Display is user@host:port/dbname.
func (c *DSNConfig) Display() string {
	cc := c.Pool.ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
}

// Secrets is the password pgx will send, from the DSN or a password
// file.
func (c *DSNConfig) Secrets() []string {
	if p := c.Pool.ConnConfig.Password; p != "" {
		return []string{p}
	}
	return nil
}

// Open makes the pool, which connects on first use, and the driver and
// the writer of c.Config on it.
func (c *DSNConfig) Open(ctx context.Context) (*heraldspec.Outbox, error) {
	pool, err := pgxpool.NewWithConfig(ctx, c.Pool)
	if err != nil {
		return nil, fmt.Errorf("opening the database %s: %w", c.Display(), err)
	}
	cfg := c.Config
	driver, err := New(pool, &cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	writer, err := NewWriter(&cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &heraldspec.Outbox{Store: driver, Admin: driver, Writer: writer, Client: pool,
		CloseFunc: pool.Close, PingFunc: pool.Ping}, nil
}

// unreachable reports whether a ping's error means the server could not
// be reached, rather than that it refused the configuration.
func unreachable(err error) bool {
	var (
		pgErr   *pgconn.PgError
		connErr *pgconn.ConnectError
		netErr  net.Error
	)
	if errors.As(err, &pgErr) {
		// The server answered. Only these classes pass: connection
		// exception (08), insufficient resources such as too many
		// connections (53), operator intervention such as starting up or
		// shutting down (57). A refused login (28) or an unknown database
		// (3D) is configuration.
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "53") ||
			strings.HasPrefix(pgErr.Code, "57")
	}
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
