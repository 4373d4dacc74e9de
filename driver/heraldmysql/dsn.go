package heraldmysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldspec"
)

// init makes heraldspec open this package's DSNs (see ParseDSN).
func init() {
	heraldspec.RegisterDatabase(heraldspec.DatabaseDriver{
		Name:        "mysql",
		Schemes:     []string{"mysql"},
		Secrets:     func(dsn string) []string { return heraldspec.UserinfoSecrets(dsn, false) },
		Unreachable: unreachable,
		Parse: func(d *heraldspec.Database) (heraldspec.DatabaseTarget, error) {
			return ParseDSN(d)
		},
	})
}

// DSNConfig is a checked MySQL database: go-sql-driver's configuration
// and the driver's Config. Open opens it.
type DSNConfig struct {
	// MySQL is go-sql-driver's configuration, password included, of the
	// first server the DSN names.
	MySQL *mysql.Config
	// Addrs are the servers the DSN names, host:port, in the order they
	// are tried: MySQL.Addr first.
	Addrs []string
	// ReadWrite is target_session_attrs=read-write: a connection is kept
	// only to a server whose read_only is off, and dropped once that
	// server turns read-only (see Connector).
	ReadWrite bool
	// Config is the driver's: the outbox table's name. It may still be
	// changed before Open.
	Config Config

	d *heraldspec.Database
}

// ParseDSN checks a mysql:// DSN of d (the DSN form below) and
// the outbox table's name, without connecting. Errors name the part that
// is wrong, never the password.
//
// The DSN form:
//
//	mysql://[user[:password]@]host[:port][,host[:port]...]/dbname[?param=value...]
//
// The port defaults to 3306 and the database is required. Several hosts
// are tried in order, each connection on its own; with the option
// target_session_attrs=read-write (as PostgreSQL's URLs say it), only a
// server whose read_only is off will do, so that a client follows a
// failover to a promoted replica (see Connector). target_session_attrs=any,
// the default, keeps the first server that answers. The other options
// are go-sql-driver's DSN parameters (tls=true, timeout=5s, ...), checked
// by it; interpolateParams is set unless the URL sets it or picks a
// character set (charset, collation), some of which forbid it (see the
// package doc). A '/', '?' or '#' of the password must be
// percent-encoded. MySQL's schema is the database: heraldspec.Database's
// Schema is refused, its Table names the outbox table; its Config may be
// a *Config.
func ParseDSN(d *heraldspec.Database) (*DSNConfig, error) {
	c := &DSNConfig{d: d}
	if base, ok := d.Config.(*Config); ok && base != nil {
		c.Config = *base
	} else if d.Config != nil {
		return nil, &heraldspec.DatabaseError{Field: "Config", Err: fmt.Errorf("a %T, not a *heraldmysql.Config", d.Config)}
	}
	_, rest, _ := strings.Cut(d.DSN, "://")
	raw := "mysql://" + rest
	// A '/', '?' or '#' in the password ends the URL's user information
	// early: the rest would be read as the host or the path.
	secrets := heraldspec.UserinfoSecrets(raw, false)
	if len(secrets) == 1 && strings.ContainsAny(secrets[0], "/?#") {
		return nil, errors.New("the password holds a '/', '?' or '#' that is not percent-encoded: write them %2F, %3F and %23")
	}
	scrub := func(s string) string {
		for _, secret := range secrets {
			if secret != "" {
				s = strings.ReplaceAll(s, secret, heraldspec.Redacted)
			}
		}
		return herald.Scrub(s)
	}
	raw, hostList := cutHostList(raw)
	var addrs []string
	if hostList != nil {
		var err error
		if addrs, err = parseHostList(hostList); err != nil {
			return nil, err
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Its error quotes the whole URL, password included: only the
		// reason is shown.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("not a mysql:// URL: %s", scrub(err.Error()))
	}
	password, _ := u.User.Password()
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, errors.New("mysql:// needs a host, as in mysql://user:password@host:3306/dbname")
	}
	if port == "" {
		port = "3306"
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return nil, errors.New("mysql:// needs one database as its path, as in mysql://user:password@host:3306/dbname")
	}
	if d.Schema != "" && d.Schema != "public" {
		return nil, &heraldspec.DatabaseError{Field: "Schema",
			Err: errors.New("on MySQL the database is the schema: name it in the DSN's path (mysql://host:3306/dbname)")}
	}
	addr := hostAddr(host, port)
	if addr == "" {
		return nil, fmt.Errorf("mysql:// host %s is not host or host:port", heraldspec.Clean(host))
	}
	if addrs == nil {
		addrs = []string{addr}
	}
	query, attrs, err := cutOption(u.RawQuery, targetSessionAttrs)
	if err != nil {
		return nil, err
	}
	switch attrs {
	case "", "any", "read-write":
	default:
		return nil, fmt.Errorf("option %s=%s: want read-write or any", targetSessionAttrs, heraldspec.Clean(attrs))
	}
	// go-sql-driver checks the options; its DSN form has no password here.
	base := "tcp(" + addr + ")/" + url.PathEscape(dbName) + "?"
	cfg, err := mysql.ParseDSN(base + query)
	if err != nil {
		// go-sql-driver does not say which option it refused: find it.
		options, _ := url.ParseQuery(query)
		for name, values := range options {
			for _, v := range values {
				if _, one := mysql.ParseDSN(base + url.Values{name: {v}}.Encode()); one != nil {
					return nil, fmt.Errorf("option %s=%s: %s", heraldspec.Clean(name), heraldspec.Clean(v), scrub(one.Error()))
				}
			}
		}
		return nil, errors.New(scrub(err.Error()))
	}
	cfg.DBName, cfg.User, cfg.Passwd = dbName, u.User.Username(), password
	if q := u.Query(); !q.Has("interpolateParams") && !q.Has("charset") && !q.Has("collation") {
		// One round trip per statement instead of prepare, execute and
		// close (see the package doc); left to the URL when it picks a
		// character set, some of which forbid it.
		cfg.InterpolateParams = true
	}
	c.MySQL, c.Addrs, c.ReadWrite = cfg, addrs, attrs == "read-write"
	if d.Table != "" {
		c.Config.Table = d.Table
	}
	if err := c.Config.Validate(); err != nil {
		msg := strings.TrimPrefix(err.Error(), "heraldmysql: ")
		if rest, ok := strings.CutPrefix(msg, "Config.Table "); ok && d.Table != "" {
			return nil, &heraldspec.DatabaseError{Field: "Table", Err: errors.New(rest)}
		}
		return nil, &heraldspec.DatabaseError{Field: "Config", Err: errors.New(msg)}
	}
	return c, nil
}

// Display is user@host:port/dbname, with every host:port of the DSN.
func (c *DSNConfig) Display() string {
	return c.MySQL.User + "@" + strings.Join(c.Addrs, ",") + "/" + c.MySQL.DBName
}

// Secrets is the password.
func (c *DSNConfig) Secrets() []string {
	if c.MySQL.Passwd != "" {
		return []string{c.MySQL.Passwd}
	}
	return nil
}

// Open makes the pool, which connects on first use, and the driver and
// the writer of c.Config on it.
func (c *DSNConfig) Open(context.Context) (*heraldspec.Outbox, error) {
	connector, err := c.Connector()
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	if c.d.MaxConns > 0 {
		db.SetMaxOpenConns(c.d.MaxConns)
	}
	cfg := c.Config
	driver, err := New(db, &cfg)
	if err == nil {
		var writer any
		if writer, err = NewWriter(&cfg); err == nil {
			return &heraldspec.Outbox{Store: driver, Admin: driver, Writer: writer, Client: db,
				CloseFunc: func() { _ = db.Close() }, PingFunc: db.PingContext}, nil
		}
	}
	_ = db.Close()
	return nil, err
}

// unreachable reports whether a ping's error means the server could not
// be reached: an error the server sent (refused credentials, an unknown
// database) is configuration. With target_session_attrs=read-write, only
// read-only servers answering is a failover under way, not configuration.
func unreachable(err error) bool {
	var (
		myErr  *mysql.MySQLError
		netErr net.Error
	)
	if errors.As(err, &myErr) {
		return false
	}
	return errors.As(err, &netErr) || errors.Is(err, errReadOnly) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysql.ErrInvalidConn)
}
