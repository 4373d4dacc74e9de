package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
)

// mysqlDB is the drain's database when --db is a mysql:// URL: a MySQL 8
// or MariaDB server, the run's own database on it (the MySQL counterpart
// of the PostgreSQL run's schema), and the admin pool that creates,
// loads, counts and drops it.
type mysqlDB struct {
	cfg     *mysql.Config // connects to the run's database
	admin   *sql.DB
	names   *heraldmysql.Config
	version string
}

// isMySQL reports whether dsn is a mysql:// URL.
func isMySQL(dsn string) bool { return strings.HasPrefix(dsn, "mysql://") }

// parseMySQLURL reads mysql://user:password@host:3306/dbname?option=value,
// the form the herald command's --db takes: the options are
// go-sql-driver's DSN parameters, checked by it. Its errors never quote
// the URL, which may hold the password.
func parseMySQLURL(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("--db: not a mysql:// URL: %s", herald.Scrub(err.Error()))
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, errors.New("--db: mysql:// needs a host, as in mysql://user:password@host:3306/dbname")
	}
	if port == "" {
		port = "3306"
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	if dbName == "" || strings.Contains(dbName, "/") {
		return nil, errors.New("--db: mysql:// needs one database as its path, as in mysql://user:password@host:3306/dbname")
	}
	addr := net.JoinHostPort(host, port)
	// The DSN given to go-sql-driver holds no password, so its error
	// cannot show one.
	cfg, err := mysql.ParseDSN("tcp(" + addr + ")/" + url.PathEscape(dbName) + "?" + u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("--db: %w", err)
	}
	password, _ := u.User.Password()
	cfg.DBName, cfg.User, cfg.Passwd = dbName, u.User.Username(), password
	if q := u.Query(); !q.Has("interpolateParams") && !q.Has("charset") && !q.Has("collation") {
		cfg.InterpolateParams = true // as herald's commands do, for Herald and the ceiling alike
	}
	return cfg, nil
}

// describeMySQL names the database without its password.
func describeMySQL(dsn string) string {
	cfg, err := parseMySQLURL(dsn)
	if err != nil {
		return "(unparsable DSN)"
	}
	return cfg.User + "@" + cfg.Addr + "/" + cfg.DBName
}

// setupMySQL creates the run's database on the server of o.db, holding a
// migrated outbox and an orders table. close drops it from the moment it
// exists.
func setupMySQL(ctx context.Context, o options, e *env) error {
	cfg, err := parseMySQLURL(o.db)
	if err != nil {
		return err
	}
	m := &mysqlDB{cfg: cfg}
	if m.admin, err = openMySQL(ctx, cfg, 4); err != nil {
		return err
	}
	e.my = m
	if err := m.admin.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&m.version); err != nil {
		return fmt.Errorf("reading the server version: %w", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "herald_bench_" + hex.EncodeToString(b[:])
	if _, err := m.admin.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	e.schema = name // close drops it from here on
	// The drain's pools connect to the run's database, so that the
	// server's list of sessions tells them from anyone else's.
	m.cfg = cfg.Clone()
	m.cfg.DBName = name
	m.names = &heraldmysql.Config{Database: name}
	d, err := heraldmysql.New(m.admin, m.names)
	if err != nil {
		return err
	}
	e.outbox = d.Table()
	e.orders = "`" + name + "`.`orders`"
	if err := d.Migrate(ctx); err != nil {
		return fmt.Errorf("creating the outbox table: %w", err)
	}
	if _, err := m.admin.ExecContext(ctx, `CREATE TABLE `+e.orders+` (
		id           BIGINT       PRIMARY KEY,
		customer_id  VARCHAR(255) NOT NULL,
		amount_cents BIGINT       NOT NULL,
		status       VARCHAR(32)  NOT NULL,
		created_at   DATETIME(6)  NOT NULL DEFAULT (UTC_TIMESTAMP(6)))`); err != nil {
		return fmt.Errorf("creating the orders table: %w", err)
	}
	return nil
}

// openMySQL opens a pool of at most maxConns connections and checks it
// works.
func openMySQL(ctx context.Context, cfg *mysql.Config, maxConns int) (*sql.DB, error) {
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to MySQL: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connecting to MySQL: %w", err)
	}
	return db, nil
}

// openStore returns a heraldmysql store on a pool of its own of maxConns
// connections, and what closes it.
func (m *mysqlDB) openStore(ctx context.Context, e *env, maxConns int) (herald.Store, func(), error) {
	db, err := openMySQL(ctx, m.cfg, maxConns)
	if err != nil {
		return nil, nil, err
	}
	closeDB := func() {
		if e.beforePoolClose != nil {
			e.beforePoolClose()
		}
		_ = db.Close()
	}
	d, err := heraldmysql.New(db, m.names)
	if err != nil {
		closeDB()
		return nil, nil, err
	}
	return d, closeDB, nil
}

// loadMySQLRows is how many rows one INSERT of the backlog writes.
const loadMySQLRows = 500

// loadBacklogMySQL writes n ready events, the rows WriteTx would write
// (UUIDv7 ids, the same fields and payload size), by multi-row INSERTs of
// loadMySQLRows each, in one transaction.
func (m *mysqlDB) loadBacklog(ctx context.Context, e *env, n, keys int) error {
	tx, err := m.admin.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("loading the backlog: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // a no-op after Commit
	prefix := `INSERT INTO ` + e.outbox + " (id, topic, `key`, type, aggregate_type, aggregate_id, payload, headers) VALUES "
	for i := 1; i <= n; {
		rows := min(loadMySQLRows, n-i+1)
		var q strings.Builder
		q.WriteString(prefix)
		args := make([]any, 0, 8*rows)
		for j := range rows {
			if j > 0 {
				q.WriteByte(',')
			}
			q.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
			id, err := uuid.NewV7()
			if err != nil {
				return err
			}
			customer := "customer-" + strconv.Itoa(i%keys)
			args = append(args, id.String(), drainSubject, customer, eventType, aggregateType, strconv.Itoa(i),
				paddedPayload(int64(i), customer, e.o.payloadBytes), headersJSON)
			i++
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("loading the backlog: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("loading the backlog: %w", err)
	}
	if _, err := m.admin.ExecContext(ctx, `ANALYZE TABLE `+e.outbox); err != nil {
		return fmt.Errorf("analyzing: %w", err)
	}
	return nil
}

// truncate empties the business and outbox tables.
func (m *mysqlDB) truncate(ctx context.Context, e *env) error {
	for _, t := range []string{e.orders, e.outbox} {
		if _, err := m.admin.ExecContext(ctx, `TRUNCATE TABLE `+t); err != nil {
			return fmt.Errorf("truncating: %w", err)
		}
	}
	return nil
}

// countState counts the outbox rows in state, or every row for "".
func (m *mysqlDB) countState(ctx context.Context, e *env, state string) (int, error) {
	var n int
	err := m.admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+e.outbox+` WHERE state = ? OR ? = ''`,
		state, state).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting %s rows: %w", state, err)
	}
	return n, nil
}

// otherActiveSessions counts the server's sessions running a statement
// that are not this run's: not in the run's database, and not the
// server's own threads.
func (m *mysqlDB) otherActiveSessions(ctx context.Context, e *env) (int, error) {
	var n int
	err := m.admin.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE COMMAND NOT IN ('Sleep', 'Daemon', 'Binlog Dump', 'Killed')
		  AND ID <> CONNECTION_ID() AND (DB IS NULL OR DB <> ?)
		  AND USER NOT IN ('system user', 'event_scheduler')`, e.schema).Scan(&n)
	return n, err
}

// close drops the run's database (unless --keep) and closes the pool.
func (m *mysqlDB) close(ctx context.Context, e *env) error {
	var err error
	if e.schema != "" && !e.o.keep {
		if _, derr := m.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+e.schema+"`"); derr != nil {
			err = fmt.Errorf("dropping database %s: %w", e.schema, derr)
		}
	}
	return errors.Join(err, m.admin.Close())
}
