//go:build linux || darwin

package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// StandbyName is the application_name of a StandbyPair's standby, the
// name its primary's synchronous_standby_names gives.
const StandbyName = "herald_standby"

// Pair is a primary and its synchronous streaming standby: two private
// clusters of one test, for a failover.
type Pair struct {
	// Primary runs with synchronous_commit=on and StandbyName as its
	// synchronous standby, so that a commit returns only once the standby
	// has flushed it.
	Primary *Cluster
	// Standby streams from Primary (pg_basebackup -R) until promoted.
	Standby *Cluster
	// DSN names both servers, primary first, with
	// target_session_attrs=read-write: a client on it connects to
	// whichever of them takes writes, so it follows a failover.
	DSN string
}

// StandbyPair starts a primary and a synchronous standby for t, and
// returns once the standby streams as the synchronous one. Both are
// removed when t ends. Without the PostgreSQL server binaries it skips t,
// or fails it when CI=true.
func StandbyPair(t testing.TB) *Pair {
	t.Helper()
	primary := privateCluster(t, "-c", "synchronous_commit=on",
		"-c", "synchronous_standby_names="+StandbyName)
	c, dsn, err := startStandby(primary.c, StandbyName)
	if err != nil {
		t.Fatalf("testenv: starting a standby of the private cluster: %v", err)
	}
	t.Cleanup(c.stop)
	standby := &Cluster{c: c, DSN: dsn}
	awaitSQL(t, primary.DSN, "the standby to stream as the synchronous one",
		`SELECT count(*) = 1 FROM pg_stat_replication
		 WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'`, StandbyName)
	return &Pair{
		Primary: primary,
		Standby: standby,
		DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
			primary.c.port, c.port),
	}
}

// startStandby copies primary with pg_basebackup -R (which writes
// standby.signal and the primary_conninfo, application_name included) and
// starts it on a port of its own.
func startStandby(primary *cluster, name string) (*cluster, string, error) {
	c, err := newClusterDir(primary.cred)
	if err != nil {
		return nil, "", err
	}
	// cluster_name is also the walreceiver's application_name when
	// primary_conninfo has none.
	c.settings = []string{"-c", "cluster_name=" + name}
	started := false
	defer func() {
		if !started {
			c.stop()
		}
	}()
	data := filepath.Join(c.dir, "data")
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.port, name)
	cmd := exec.Command(serverTool(primary.postgres, "pg_basebackup"),
		"-D", data, "-d", conninfo, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: primary.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("pg_basebackup: %w: %s", err, strings.TrimSpace(string(out)))
	}
	dsn, err := c.listen(primary.postgres, data, primary.cred)
	if err != nil {
		return nil, "", err
	}
	started = true
	return c, dsn, nil
}

// Promote ends a standby's recovery (pg_ctl promote) and waits until it
// takes writes: pg_is_in_recovery() is false.
func (pc *Cluster) Promote(t testing.TB) {
	t.Helper()
	pc.pgCtl(t, "promote", "-W")
	awaitSQL(t, pc.DSN, "the promoted standby to leave recovery", `SELECT NOT pg_is_in_recovery()`)
}

// Crash stops the server as a crash would (pg_ctl stop -m immediate: no
// checkpoint, every connection cut at once) and waits for it to exit.
// Start brings it back through crash recovery.
func (pc *Cluster) Crash(t testing.TB) {
	t.Helper()
	c := pc.c
	if c.cmd == nil || c.reaped {
		return
	}
	// -W: the wait is ours, on the postmaster, which is this process's child.
	pc.pgCtl(t, "stop", "-m", "immediate", "-W")
	kill := time.AfterFunc(30*time.Second, func() { _ = c.cmd.Process.Kill() })
	_ = c.cmd.Wait()
	kill.Stop()
	c.reaped = true
}

func (pc *Cluster) pgCtl(t testing.TB, args ...string) {
	t.Helper()
	c := pc.c
	cmd := exec.Command(serverTool(c.postgres, "pg_ctl"), append(args, "-D", c.data)...)
	cmd.Dir = c.dir
	// pg_ctl refuses to run as root, like the server.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: pg_ctl %s: %v: %s", args[0], err, strings.TrimSpace(string(out)))
	}
}

// serverTool returns the path of a program of the installation postgres
// belongs to (pg_ctl, pg_basebackup), which must be of its version. PATH
// may hold a link to postgres alone, as /usr/local/bin may on Debian, so
// the link's target directory comes first.
func serverTool(postgres, name string) string {
	dirs := []string{filepath.Dir(postgres)}
	if real, err := filepath.EvalSymlinks(postgres); err == nil {
		dirs = append([]string{filepath.Dir(real)}, dirs...)
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	return name // from PATH, with exec's error if it is not there either
}

// awaitSQL waits until query, a boolean, is true on dsn.
func awaitSQL(t testing.TB, dsn, what, query string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(startTimeout)
	var last error
	for time.Now().Before(deadline) {
		ok, err := queryBool(dsn, query, args...)
		if ok {
			return
		}
		last = err
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("testenv: waited %s for %s (last error: %v)", startTimeout, what, last)
}

func queryBool(dsn, query string, args ...any) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	var ok bool
	err = conn.QueryRow(ctx, query, args...).Scan(&ok)
	return ok, err
}
