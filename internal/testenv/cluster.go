//go:build linux || darwin

package testenv

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// clusterDirPrefix names the temporary directories of throwaway clusters, so
// that a later test binary can find and sweep the ones left behind.
const clusterDirPrefix = "heraldtest-pg-"

// startTimeout bounds the wait for postgres to accept connections. It is
// generous because a loaded CI machine can take seconds to start it.
const startTimeout = 30 * time.Second

// cluster is a throwaway PostgreSQL cluster: a data directory and the
// postmaster serving it.
type cluster struct {
	dir string
	// lock stays flock'ed while this process lives. The kernel drops the lock
	// when the process dies, however it dies, which is how a sweeper tells a
	// leftover directory from a live one.
	lock   *os.File
	cmd    *exec.Cmd
	reaped bool
	// What run needs to start the same server again.
	postgres, data string
	port           int
	cred           *syscall.Credential
	// settings are postgres arguments given after the defaults of run,
	// which they override (the last -c of a setting wins).
	settings []string
}

var errPortTaken = errors.New("port taken")

func startCluster(settings ...string) (*cluster, string, error) {
	initdb, postgres, err := postgresBinaries()
	if err != nil {
		return nil, "", err
	}
	cred, err := clusterCredential()
	if err != nil {
		return nil, "", err
	}
	c, err := newClusterDir(cred)
	if err != nil {
		return nil, "", err
	}
	c.settings = settings
	started := false
	defer func() {
		if !started {
			c.stop()
		}
	}()

	data := filepath.Join(c.dir, "data")
	// -U fixes the superuser's name, so the DSN does not depend on who runs
	// the tests. --no-sync and --no-locale shave time and keep sorting
	// identical on every machine.
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "-A", "trust",
		"-E", "UTF8", "--no-locale", "--no-sync")
	// The postgres user may not be allowed into the test's working directory,
	// and initdb fails if it cannot resolve its current directory.
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	dsn, err := c.listen(postgres, data, cred)
	if err != nil {
		return nil, "", err
	}
	started = true
	return c, dsn, nil
}

// newClusterDir makes and locks the directory of a new cluster, owned by
// whoever the server runs as.
func newClusterDir(cred *syscall.Credential) (*cluster, error) {
	dir, lock, err := newServerDir(clusterDirPrefix)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, lock: lock}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			c.stop()
			return nil, fmt.Errorf("handing cluster directory to user postgres: %w", err)
		}
	}
	return c, nil
}

// listen starts the postmaster on a free port. Another process can take
// the port between our probe and postgres's bind, so a lost race gets a
// new port instead of a failure.
func (c *cluster) listen(postgres, data string, cred *syscall.Credential) (string, error) {
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return "", fmt.Errorf("finding a free port: %w", err)
		}
		dsn, err := c.run(postgres, data, port, cred)
		if err == nil {
			return dsn, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return "", err
		}
	}
}

// run starts the postmaster and waits until it accepts connections.
func (c *cluster) run(postgres, data string, port int, cred *syscall.Credential) (string, error) {
	c.postgres, c.data, c.port, c.cred = postgres, data, port, cred
	logPath := filepath.Join(c.dir, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("creating postgres log: %w", err)
	}
	cmd := exec.Command(postgres, "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories="+c.dir,
		// Durability buys nothing for data deleted when the tests end.
		"-c", "fsync=off",
		"-c", "synchronous_commit=off",
		"-c", "full_page_writes=off",
		// Parallel tests each open a pool.
		"-c", "max_connections=200",
		// The change-data-capture source reads logical replication slots.
		"-c", "wal_level=logical",
		"-c", "max_replication_slots=20",
		"-c", "max_wal_senders=20",
	)
	cmd.Args = append(cmd.Args, c.settings...)
	cmd.Dir = c.dir
	// An *os.File is handed to the child as is; any other writer would need
	// a copying goroutine, which goleak in other packages would report.
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group keeps a terminal's ^C from reaching postgres
	// before the test binary has had a chance to stop it.
	attr := &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	err = cmd.Start()
	_ = logf.Close()
	if err != nil {
		return "", fmt.Errorf("starting postgres: %w", err)
	}
	c.cmd, c.reaped = cmd, false

	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return dsn, nil
		}
		if c.exited() {
			log := lastLines(logPath, 20)
			if strings.Contains(log, "could not bind") {
				return "", fmt.Errorf("%w: %s", errPortTaken, log)
			}
			return "", fmt.Errorf("postgres exited during startup:\n%s", log)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("postgres not ready after %s: %v\n%s", startTimeout, err, lastLines(logPath, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exited reports, without blocking, whether the postmaster has exited.
// cmd.Wait cannot answer that: it blocks, and a goroutine parked in it for
// the life of the server is exactly what goleak reports.
func (c *cluster) exited() bool {
	pid := c.cmd.Process.Pid
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if got == pid || errors.Is(err, syscall.ECHILD) {
		c.reaped = true
		_ = c.cmd.Process.Release()
		return true
	}
	return false
}

func (c *cluster) stop() {
	if c.cmd != nil && !c.reaped {
		// SIGQUIT is an immediate shutdown: the checkpoint of a fast shutdown
		// would be wasted on data about to be deleted.
		_ = c.cmd.Process.Signal(syscall.SIGQUIT)
		kill := time.AfterFunc(10*time.Second, func() { _ = c.cmd.Process.Kill() })
		_ = c.cmd.Wait()
		kill.Stop()
		c.reaped = true
	}
	_ = os.RemoveAll(c.dir)
	if c.lock != nil {
		// Only now, so that no sweeper sees the directory unlocked while
		// postgres still uses it.
		_ = c.lock.Close()
	}
}

// halt shuts the postmaster down (fast shutdown: connections are cut,
// data is kept) and waits for it to exit.
func (c *cluster) halt() {
	if c.cmd == nil || c.reaped {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	kill := time.AfterFunc(30*time.Second, func() { _ = c.cmd.Process.Kill() })
	_ = c.cmd.Wait()
	kill.Stop()
	c.reaped = true
}

// newServerDir makes and locks the temporary directory of a server a test
// starts, named prefix and something random, after sweeping the ones of
// prefix that dead test binaries left behind.
func newServerDir(prefix string) (string, *os.File, error) {
	sweepStaleClusters(prefix)
	// Not t.TempDir: the server outlives the test that happened to start it.
	dir, err := os.MkdirTemp("", prefix+"*")
	if err != nil {
		return "", nil, fmt.Errorf("creating server directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, lock, nil
}

func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return f, nil
}

// sweepStaleClusters removes the directories of servers named prefix whose
// test binary died without StopPostgres or its test's cleanup, which is the
// usual case: goleak.VerifyTestMain and plain `go test` exit without
// running any cleanup. Each directory is tens of megabytes, so they would
// otherwise pile up in the temp dir.
func sweepStaleClusters(prefix string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		// A young directory may belong to a process that has created it but
		// not yet locked it.
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		f, err := os.Open(filepath.Join(d, "lock"))
		if errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(d)
			continue
		}
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(d)
		}
		_ = f.Close()
	}
}

// clusterCredential returns whom to run initdb and postgres as: nil for the
// current user, or the postgres OS user when running as root, because both
// programs refuse to run as root.
func clusterCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("initdb refuses to run as root, and there is no OS user postgres to run it as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of user postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// postgresBinaries returns the paths of initdb and postgres of one
// installation: the one in PATH, or else the highest version of Debian's
// /usr/lib/postgresql/<version>/bin, which is not in PATH by default.
func postgresBinaries() (initdb, postgres string, err error) {
	if i, err := exec.LookPath("initdb"); err == nil {
		// initdb insists on a postgres of its own version, so prefer the
		// one next to it over whatever else PATH finds first.
		if p := filepath.Join(filepath.Dir(i), "postgres"); isExecutable(p) {
			return i, p, nil
		}
		if p, err := exec.LookPath("postgres"); err == nil {
			return i, p, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return -compareVersions(filepath.Base(filepath.Dir(a)), filepath.Base(filepath.Dir(b)))
	})
	for _, d := range dirs {
		i, p := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	return "", "", errors.New("initdb and postgres not found in PATH or /usr/lib/postgresql/*/bin")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// compareVersions orders "9.6" before "10" and "15", which a string sort
// would not.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// lastLines returns the end of a server log for an error message.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
