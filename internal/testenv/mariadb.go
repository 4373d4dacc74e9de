//go:build linux || darwin

package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// mariaDirPrefix names the temporary directories of MariaDB pairs, for
// the sweep of the ones a dead test binary left behind.
const mariaDirPrefix = "heraldtest-maria-"

// MariaDBDatabase is the database a MariaDBPair creates on its primary,
// which replicates it.
const MariaDBDatabase = "test"

// semiSyncTimeout is how long the primary waits for its replica's
// acknowledgement of a commit before it gives up on semi-synchronous
// replication and acknowledges commits on its own: longer than any test,
// so that a commit the client hears of is always on the replica.
const semiSyncTimeout = time.Hour

// MariaDBServer is one server of a MariaDBPair.
type MariaDBServer struct {
	// DSN is go-sql-driver's DSN of user root (no password) and database
	// MariaDBDatabase: root@tcp(127.0.0.1:port)/test.
	DSN string
	// Addr is its 127.0.0.1:port.
	Addr string

	name, dir, data string
	serverID        int
	cmd             *exec.Cmd
	reaped          bool
	port            int
}

// MariaDBPair is a private MariaDB primary and its replica, of one test:
// GTID replication, semi-synchronous and waiting for the replica after
// the binary log's sync (rpl_semi_sync_master_wait_point=AFTER_SYNC), so
// that a commit returns to its client only once the replica has it in its
// relay log, and no other session sees the commit before then. The
// replica runs with read_only=ON until promoted.
type MariaDBPair struct {
	Primary, Replica *MariaDBServer
	// URL is heraldmysql's DSN of both servers, primary first, with
	// target_session_attrs=read-write: a client on it connects to
	// whichever of them takes writes, so it follows a failover.
	URL string

	dir  string
	lock *os.File
}

// StartMariaDBPair starts a primary and its semi-synchronous replica on
// free ports, in a temporary directory, and returns once the primary has
// the replica as its semi-synchronous one and both have database
// MariaDBDatabase. Both servers die with the test binary (on Linux the kernel kills
// them) and are removed when t ends. Without mariadbd and
// mariadb-install-db it skips t, or fails it when CI=true.
func StartMariaDBPair(t testing.TB) *MariaDBPair {
	t.Helper()
	server, install, err := mariaDBBinaries()
	if err != nil {
		Unavailable(t, fmt.Sprintf("testenv: cannot start a private MariaDB pair (%v); "+
			"install the MariaDB server (apt-get install mariadb-server)", err))
	}
	p := &MariaDBPair{}
	if p.dir, p.lock, err = newServerDir(mariaDirPrefix); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(p.stop)
	p.Primary = &MariaDBServer{name: "primary", dir: p.dir, data: filepath.Join(p.dir, "primary"), serverID: 1}
	p.Replica = &MariaDBServer{name: "replica", dir: p.dir, data: filepath.Join(p.dir, "replica"), serverID: 2}
	if err := installMariaDB(install, p.Primary.data, p.Replica.data); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := p.Primary.listen(server,
		// Waits for the replica whether or not it is connected, and for
		// an hour: the primary never acknowledges a commit the replica
		// does not have.
		"--rpl-semi-sync-master-enabled=ON",
		"--rpl-semi-sync-master-wait-no-slave=ON",
		"--rpl-semi-sync-master-timeout="+strconv.FormatInt(semiSyncTimeout.Milliseconds(), 10),
		"--rpl-semi-sync-master-wait-point=AFTER_SYNC"); err != nil {
		t.Fatalf("testenv: starting the MariaDB primary: %v", err)
	}
	if err := p.Replica.listen(server, "--rpl-semi-sync-slave-enabled=ON", "--read-only=ON"); err != nil {
		t.Fatalf("testenv: starting the MariaDB replica: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err = mariaExec(ctx, p.Replica.bare(),
		fmt.Sprintf(`CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = %d, MASTER_USER = 'root',
			MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos, MASTER_CONNECT_RETRY = 1`, p.Primary.port),
		`START SLAVE`)
	if err != nil {
		t.Fatalf("testenv: starting replication: %v", err)
	}
	awaitMaria(t, p.Primary.bare(), "the replica to connect as the semi-synchronous one",
		`SELECT VARIABLE_VALUE = 1 FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'`)
	// Waits for the replica's acknowledgement, as every commit will.
	if err := mariaExec(ctx, p.Primary.bare(), "CREATE DATABASE "+MariaDBDatabase); err != nil {
		t.Fatalf("testenv: creating database %s: %v", MariaDBDatabase, err)
	}
	// The replica has received it; Replica.DSN needs it applied too.
	awaitMaria(t, p.Replica.bare(), "the replica to apply the database's creation",
		`SELECT count(*) = 1 FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '`+MariaDBDatabase+`'`)
	p.URL = fmt.Sprintf("mysql://root@%s,%s/%s?target_session_attrs=read-write",
		p.Primary.Addr, p.Replica.Addr, MariaDBDatabase)
	return p
}

// Promote makes the replica a primary, as an operator would once the
// primary is lost: it stops receiving (STOP SLAVE IO_THREAD), applies all
// it received (MASTER_GTID_WAIT on its Gtid_IO_Pos: the relay log holds
// commits the primary acknowledged, which stopping replication at once
// would drop), forgets its primary (RESET SLAVE ALL) and takes writes
// (read_only=OFF).
func (p *MariaDBPair) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	dsn := p.Replica.DSN
	if err := mariaExec(ctx, dsn, `STOP SLAVE IO_THREAD`); err != nil {
		t.Fatalf("testenv: promoting the replica: %v", err)
	}
	received, err := mariaSlaveStatus(ctx, dsn, "Gtid_IO_Pos")
	if err != nil {
		t.Fatalf("testenv: promoting the replica: %v", err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("testenv: promoting the replica: %v", err)
	}
	defer db.Close()
	var waited int
	err = db.QueryRowContext(ctx, `SELECT MASTER_GTID_WAIT(?, ?)`, received, startTimeout.Seconds()).Scan(&waited)
	if err != nil || waited != 0 {
		t.Fatalf("testenv: promoting the replica: applying its relay log up to %q: %d, %v", received, waited, err)
	}
	if err := mariaExec(ctx, dsn, `STOP SLAVE`, `RESET SLAVE ALL`, `SET GLOBAL read_only = OFF`); err != nil {
		t.Fatalf("testenv: promoting the replica: %v", err)
	}
}

// StopPrimary kills the primary as a crash would (SIGKILL: every
// connection cut at once) and waits for it to exit. A commit waiting for
// the replica's acknowledgement then fails for its client.
func (p *MariaDBPair) StopPrimary(t testing.TB) {
	t.Helper()
	p.Primary.kill()
}

func (p *MariaDBPair) stop() {
	if p.Primary != nil {
		p.Primary.kill()
	}
	if p.Replica != nil {
		p.Replica.kill()
	}
	_ = os.RemoveAll(p.dir)
	// Only now, so that no sweeper sees the directory unlocked while a
	// server still uses it.
	_ = p.lock.Close()
}

// mariaDBBinaries returns the paths of mariadbd and mariadb-install-db
// (or their mysqld and mysql_install_db names of older packages), in PATH
// or in the sbin directories Debian puts the server in.
func mariaDBBinaries() (server, install string, err error) {
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
			for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin", "/usr/local/bin"} {
				if p := filepath.Join(d, n); isExecutable(p) {
					return p
				}
			}
		}
		return ""
	}
	server, install = find("mariadbd"), find("mariadb-install-db")
	if server == "" || install == "" {
		return "", "", errors.New("mariadbd and mariadb-install-db not found in PATH or /usr/sbin")
	}
	return server, install, nil
}

// asRoot is the option mariadbd and mariadb-install-db need to run as
// root, which they refuse otherwise; a throwaway server of a test's own
// runs as whoever runs the test.
func asRoot() []string {
	if os.Geteuid() == 0 {
		return []string{"--user=root"}
	}
	return nil
}

// mariaSettings are the options of both the installation and the
// servers: small and without durability, which buys nothing for data
// deleted when the test ends.
var mariaSettings = []string{
	"--innodb-log-file-size=8M",
	"--innodb-buffer-pool-size=32M",
	"--innodb-flush-log-at-trx-commit=2",
	"--sync-binlog=0",
}

// installMariaDB makes the first data directory with mariadb-install-db
// and copies it to the others, which is quicker than installing again.
func installMariaDB(install string, data ...string) error {
	args := append([]string{"--no-defaults"}, asRoot()...)
	args = append(args, "--datadir="+data[0], "--auth-root-authentication-method=normal", "--skip-test-db")
	cmd := exec.Command(install, append(args, mariaSettings...)...)
	cmd.Dir = filepath.Dir(data[0])
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w: %s", err, strings.TrimSpace(string(out)))
	}
	for _, d := range data[1:] {
		if out, err := exec.Command("cp", "-R", "-p", data[0], d).CombinedOutput(); err != nil {
			return fmt.Errorf("copying the installed data directory: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// listen starts the server on a free port. Another process can take the
// port between the probe and mariadbd's bind, so a lost race gets a new
// port instead of a failure.
func (s *MariaDBServer) listen(server string, settings ...string) error {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("finding a free port: %w", err)
		}
		err = s.run(server, port, settings)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return err
		}
	}
}

// run starts mariadbd and waits until it takes connections.
func (s *MariaDBServer) run(server string, port int, settings []string) error {
	s.port = port
	s.Addr = "127.0.0.1:" + strconv.Itoa(port)
	s.DSN = "root@tcp(" + s.Addr + ")/" + MariaDBDatabase
	logPath := filepath.Join(s.dir, s.name+".err")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("creating the server log: %w", err)
	}
	args := append([]string{"--no-defaults"}, asRoot()...)
	args = append(args,
		"--datadir="+s.data,
		"--port="+strconv.Itoa(port),
		"--socket="+filepath.Join(s.dir, s.name+".sock"),
		"--pid-file="+filepath.Join(s.dir, s.name+".pid"),
		"--bind-address=127.0.0.1",
		// Connections come from 127.0.0.1, whose root account
		// mariadb-install-db makes; no lookup of its name.
		"--skip-name-resolve",
		"--server-id="+strconv.Itoa(s.serverID),
		"--log-bin="+filepath.Join(s.data, "binlog"),
		"--relay-log="+filepath.Join(s.data, "relay"),
		"--log-slave-updates=ON",
		"--binlog-format=ROW",
		"--gtid-strict-mode=ON",
		"--max-connections=200",
		// The relay's claim waits on no lock for long; a stuck one fails.
		"--innodb-lock-wait-timeout=20",
	)
	args = append(args, mariaSettings...)
	cmd := exec.Command(server, append(args, settings...)...)
	cmd.Dir = s.dir
	// An *os.File is handed to the child as is; any other writer would
	// need a copying goroutine, which goleak would report.
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group keeps a terminal's ^C from reaching the server
	// before the test binary has had a chance to stop it.
	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return fmt.Errorf("starting mariadbd: %w", err)
	}
	s.cmd, s.reaped = cmd, false

	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := mariaExec(ctx, s.bare(), "SELECT 1")
		cancel()
		if err == nil {
			return nil
		}
		if s.exited() {
			log := lastLines(logPath, 20)
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: %s", errPortTaken, log)
			}
			return fmt.Errorf("mariadbd exited during startup:\n%s", log)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("mariadbd not ready after %s: %v\n%s", startTimeout, err, lastLines(logPath, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bare is DSN without the database, which the pair creates once both
// servers run.
func (s *MariaDBServer) bare() string { return "root@tcp(" + s.Addr + ")/" }

// exited reports, without blocking, whether the server has exited.
func (s *MariaDBServer) exited() bool {
	pid := s.cmd.Process.Pid
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if got == pid || errors.Is(err, syscall.ECHILD) {
		s.reaped = true
		_ = s.cmd.Process.Release()
		return true
	}
	return false
}

// kill kills the server's process group and reaps it.
func (s *MariaDBServer) kill() {
	if s.cmd == nil || s.reaped {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.reaped = true
}

// mariaExec runs statements in order on one connection of dsn.
func mariaExec(ctx context.Context, dsn string, statements ...string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	cfg.Timeout = time.Second
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	for _, s := range statements {
		if _, err := conn.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", strings.Fields(s)[0], err)
		}
	}
	return nil
}

// mariaSlaveStatus returns a column of SHOW SLAVE STATUS.
func mariaSlaveStatus(ctx context.Context, dsn, column string) (string, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "", err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SHOW SLAVE STATUS`)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	if !rows.Next() {
		return "", fmt.Errorf("SHOW SLAVE STATUS: no replication configured (%v)", rows.Err())
	}
	values := make([]sql.NullString, len(cols))
	dest := make([]any, len(cols))
	for i := range values {
		dest[i] = &values[i]
	}
	if err := rows.Scan(dest...); err != nil {
		return "", err
	}
	for i, c := range cols {
		if c == column {
			return values[i].String, nil
		}
	}
	return "", fmt.Errorf("SHOW SLAVE STATUS has no column %s", column)
}

// awaitMaria waits until query, a boolean, is true on dsn.
func awaitMaria(t testing.TB, dsn, what, query string) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		db, err := sql.Open("mysql", dsn)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var ok bool
			err = db.QueryRowContext(ctx, query).Scan(&ok)
			cancel()
			_ = db.Close()
			if ok {
				return
			}
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("testenv: waited %s for %s (last error: %v)", startTimeout, what, last)
}
