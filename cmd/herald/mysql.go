package main

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/herald-outbox/herald/driver/heraldmysql"
)

// parseMySQL checks a mysql://user:password@host:3306/db?option=value DSN
// and the table name. The URL's options are go-sql-driver's DSN parameters
// (tls=true, timeout=5s, ...), checked by it; the database is the path,
// and it is required.
func (d *dbFlags) parseMySQL(inv *invocation, raw string) (*database, error) {
	label := inv.flags.label("db")
	// A '/', '?' or '#' in the password ends the URL's user information
	// early: the rest would be read as the host or the path.
	if pw := userinfoSecrets(raw, false); len(pw) == 1 && strings.ContainsAny(pw[0], "/?#") {
		return nil, usagef("%s: the password holds a '/', '?' or '#' that is not percent-encoded: write them %%2F, %%3F and %%23", label)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// Its error quotes the whole URL, password included: only the
		// reason is shown.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, usagef("%s: not a mysql:// URL: %s", label, inv.stderr.scrub(err.Error()))
	}
	password, _ := u.User.Password()
	inv.stderr.add(password)
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, usagef("%s: mysql:// needs a host, as in mysql://user:password@host:3306/dbname", label)
	}
	if port == "" {
		port = "3306"
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return nil, usagef("%s: mysql:// needs one database as its path, as in mysql://user:password@host:3306/dbname", label)
	}
	if *d.schema != "public" {
		return nil, usagef("%s: on MySQL the database is the schema: name it in --db's path (mysql://host:3306/dbname)", inv.flags.label("schema"))
	}
	addr := net.JoinHostPort(host, port)
	// go-sql-driver checks the options; its DSN form has no password here.
	cfg, err := mysql.ParseDSN("tcp(" + addr + ")/" + url.PathEscape(dbName) + "?" + u.RawQuery)
	if err != nil {
		return nil, usagef("%s: %s", label, inv.stderr.scrub(err.Error()))
	}
	cfg.DBName, cfg.User, cfg.Passwd = dbName, u.User.Username(), password
	if q := u.Query(); !q.Has("interpolateParams") && !q.Has("charset") && !q.Has("collation") {
		// One round trip per statement instead of prepare, execute and
		// close (see heraldmysql's package doc); left to the URL when it
		// picks a character set, some of which forbid it.
		cfg.InterpolateParams = true
	}
	names := &heraldmysql.Config{Table: *d.table}
	if err := names.Validate(); err != nil {
		return nil, usagef("%s", strings.ReplaceAll(err.Error(), "heraldmysql: Config.Table", inv.flags.label("table")))
	}
	return &database{mysql: cfg, mysqlNames: names, where: cfg.User + "@" + addr + "/" + dbName}, nil
}

// openMySQL opens a pool over the MySQL server, which connects on first
// use.
func (db *database) openMySQL() (closer, outbox, error) {
	connector, err := mysql.NewConnector(db.mysql)
	if err != nil {
		return nil, nil, err
	}
	pool := sqlPool{sql.OpenDB(connector)}
	driver, err := heraldmysql.New(pool.DB, db.mysqlNames)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, driver, nil
}

// sqlPool is a database/sql pool as the commands close and reach it.
type sqlPool struct{ *sql.DB }

func (p sqlPool) Close()                         { _ = p.DB.Close() }
func (p sqlPool) Ping(ctx context.Context) error { return p.PingContext(ctx) }
