package heraldmysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// readOnlyRecheck is how long a connection to a server that took writes
// is reused before the server's read_only is read again: a primary
// demoted in a switchover turns read-only without dropping its clients,
// and an account allowed to ignore read_only (root; READ_ONLY ADMIN on
// MariaDB, CONNECTION_ADMIN or SUPER on MySQL) writes on a read-only
// server without an error, so that errors alone would not tell.
const readOnlyRecheck = time.Second

// Connector returns the database/sql connector of c, for sql.OpenDB: for
// one server and target_session_attrs=any, go-sql-driver's own.
//
// Otherwise each new connection tries the DSN's servers in order, and
// keeps the first that answers or, with target_session_attrs=read-write,
// the first whose @@global.read_only is 0; when none will do, the error
// names each server and what it said. A read-write connection back from
// the pool reads read_only again before it is reused if a second has
// passed since it last did, or if a statement on it failed as on a
// read-only server (error 1290); on a server that turned read-only it is
// dropped (driver.ErrBadConn), and database/sql opens another, to the
// server that now takes writes. A connection to a server that died fails
// its liveness check or its next statement, as with one server.
func (c *DSNConfig) Connector() (driver.Connector, error) {
	if len(c.Addrs) <= 1 && !c.ReadWrite {
		return mysql.NewConnector(c.MySQL)
	}
	addrs := c.Addrs
	if len(addrs) == 0 {
		addrs = []string{c.MySQL.Addr}
	}
	hc := &hostsConnector{readWrite: c.ReadWrite}
	for _, addr := range addrs {
		cfg := c.MySQL.Clone()
		cfg.Addr = addr
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		hc.hosts = append(hc.hosts, host{addr: addr, connector: conn})
	}
	return hc, nil
}

type host struct {
	addr      string
	connector driver.Connector
}

// hostsConnector connects to the first of its hosts that will do.
type hostsConnector struct {
	hosts     []host
	readWrite bool
}

// Connect tries each host in order.
func (c *hostsConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var errs []error
	for _, h := range c.hosts {
		conn, err := h.connector.Connect(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h.addr, err))
			if ctx.Err() != nil {
				break
			}
			continue
		}
		if !c.readWrite {
			return conn, nil
		}
		ro, err := readOnly(ctx, conn)
		if err == nil && !ro {
			return &writableConn{conn: conn, checked: time.Now()}, nil
		}
		_ = conn.Close()
		if err == nil {
			err = errReadOnly
		}
		errs = append(errs, fmt.Errorf("%s: %w", h.addr, err))
	}
	what := "answers"
	if c.readWrite {
		what = "takes writes"
	}
	addrs := make([]string, len(c.hosts))
	for i, h := range c.hosts {
		addrs[i] = h.addr
	}
	return nil, &noServerError{what: what, addrs: addrs, err: errors.Join(errs...)}
}

// Driver is go-sql-driver's.
func (c *hostsConnector) Driver() driver.Driver { return mysql.MySQLDriver{} }

// errReadOnly is a server whose read_only is on, where a read-write
// connection will not stay.
var errReadOnly = errors.New("read-only (@@global.read_only = 1)")

// noServerError is a connection that no server of a DSN would take.
type noServerError struct {
	what  string
	addrs []string
	err   error // each server's, joined
}

func (e *noServerError) Error() string {
	return "heraldmysql: no server of " + strings.Join(e.addrs, ",") + " " + e.what + ": " +
		strings.ReplaceAll(e.err.Error(), "\n", "; ")
}

func (e *noServerError) Unwrap() error { return e.err }

// readOnly reads the server's global read_only on conn.
func readOnly(ctx context.Context, conn driver.Conn) (bool, error) {
	q, ok := conn.(driver.QueryerContext)
	if !ok {
		return false, fmt.Errorf("a %T cannot query", conn)
	}
	rows, err := q.QueryContext(ctx, `SELECT @@global.read_only`, nil)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	v := make([]driver.Value, 1)
	if err := rows.Next(v); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("SELECT @@global.read_only returned no row")
		}
		return false, err
	}
	switch v := v[0].(type) {
	case int64:
		return v != 0, nil
	case []byte:
		return string(v) != "0", nil
	}
	return false, fmt.Errorf("SELECT @@global.read_only returned a %T", v[0])
}

// erOptionPreventsStatement is the error of a write on a read-only
// server (MySQL's and MariaDB's ER_OPTION_PREVENTS_STATEMENT).
const erOptionPreventsStatement = 1290

// writableConn is a connection of go-sql-driver to a server that took
// writes when last asked, which it asks again before reuse (see
// Connector). database/sql uses a connection from one goroutine at a
// time, so its fields need no lock.
type writableConn struct {
	conn    driver.Conn
	checked time.Time // when read_only was last read off
	suspect bool      // a statement failed as on a read-only server
	bad     bool      // the server turned read-only
}

// note marks the connection for a check of read_only when err is what a
// read-only server answers a write.
func (c *writableConn) note(err error) {
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == erOptionPreventsStatement {
		c.suspect = true
	}
}

// ResetSession runs when database/sql takes the connection from its pool
// for reuse: go-sql-driver's liveness check, then read_only when due. An
// error other than driver.ErrBadConn would fail the caller's statement;
// a connection whose check failed is as good as broken.
func (c *writableConn) ResetSession(ctx context.Context) error {
	if r, ok := c.conn.(driver.SessionResetter); ok {
		if err := r.ResetSession(ctx); err != nil {
			return err
		}
	}
	if !c.suspect && time.Since(c.checked) < readOnlyRecheck {
		return nil
	}
	ro, err := readOnly(ctx, c.conn)
	if err != nil || ro {
		c.bad = true
		return driver.ErrBadConn
	}
	c.checked, c.suspect = time.Now(), false
	return nil
}

// IsValid runs when the connection goes back to the pool.
func (c *writableConn) IsValid() bool {
	if c.bad {
		return false
	}
	if v, ok := c.conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *writableConn) Prepare(query string) (driver.Stmt, error) { return c.conn.Prepare(query) }

func (c *writableConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	s, err := c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	c.note(err)
	return s, err
}

func (c *writableConn) Close() error { return c.conn.Close() }

//nolint:staticcheck // driver.Conn requires Begin; database/sql calls BeginTx.
func (c *writableConn) Begin() (driver.Tx, error) { return c.conn.Begin() }

func (c *writableConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	c.note(err)
	return tx, err
}

func (c *writableConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	c.note(err)
	return r, err
}

func (c *writableConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	c.note(err)
	return r, err
}

func (c *writableConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }

// CheckNamedValue keeps go-sql-driver's conversions of arguments.
func (c *writableConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// The interfaces database/sql looks for on go-sql-driver's connections.
var (
	_ driver.Conn               = (*writableConn)(nil)
	_ driver.ConnBeginTx        = (*writableConn)(nil)
	_ driver.ConnPrepareContext = (*writableConn)(nil)
	_ driver.ExecerContext      = (*writableConn)(nil)
	_ driver.QueryerContext     = (*writableConn)(nil)
	_ driver.Pinger             = (*writableConn)(nil)
	_ driver.SessionResetter    = (*writableConn)(nil)
	_ driver.Validator          = (*writableConn)(nil)
	_ driver.NamedValueChecker  = (*writableConn)(nil)
)
