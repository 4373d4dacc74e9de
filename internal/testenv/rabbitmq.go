//go:build linux || darwin

package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvRabbitMQServer names the environment variable holding the path of
// RabbitMQ's rabbitmq-server script, when it is not found by itself.
const EnvRabbitMQServer = "HERALD_TEST_RABBITMQ_SERVER"

// RabbitTLSConfig is what a private RabbitMQ node of RabbitTLS serves: a
// TLS listener with these files (PEM) and one user.
type RabbitTLSConfig struct {
	// CertFile and KeyFile are the server's certificate and its key.
	CertFile, KeyFile string
	// CAFile holds the CAs whose client certificates the node accepts
	// (RabbitMQ reads it even when it verifies no client).
	CAFile string
	// VerifyClients has the node ask every client for a certificate that
	// CAFile's CAs signed and refuse the handshake without one (verify_peer,
	// fail_if_no_peer_cert). Otherwise it asks for none.
	VerifyClients bool
	// User and Password are the node's only user, allowed everything on
	// the vhost /.
	User, Password string
}

// RabbitNode is a RabbitMQ node of one test's own, started by RabbitTLS.
type RabbitNode struct {
	// Addr is the TLS listener, 127.0.0.1:PORT; the node has no other.
	Addr string
	// Name is the node's Erlang name, herald-tls-<random>@localhost.
	Name string
	// Boot is how long the node took to accept clients.
	Boot time.Duration

	cmd    *exec.Cmd
	stdin  *os.File
	reaped bool
}

// rabbitStartTimeout bounds a node's boot, which takes seconds on an idle
// machine and several times that on a loaded CI machine.
const rabbitStartTimeout = 90 * time.Second

// rabbitReady is the line a node logs once its listeners take clients.
const rabbitReady = "Server startup complete"

// RabbitTLS starts a RabbitMQ node of t's own from the machine's
// installation, listening with TLS only on a random port of 127.0.0.1, and
// kills it when t ends. Its state, logs and configuration live in a
// temporary directory; the machine's node, its configuration
// (/etc/rabbitmq) and its Erlang cookie are left alone. Without RabbitMQ
// the test skips, except with CI=true, where it fails.
//
// The node dies with the test binary, however that ends: its standard
// input is a pipe the test binary holds, and RabbitMQ started with
// RABBITMQ_ALLOW_INPUT halts at the end of its input (and on Linux the
// kernel kills it too). The one process it can leave behind is epmd,
// Erlang's name server, which the first node of a machine starts and every
// later one shares.
func RabbitTLS(t testing.TB, cfg RabbitTLSConfig) *RabbitNode {
	t.Helper()
	server, err := rabbitServer()
	if err != nil {
		Unavailable(t, fmt.Sprintf("%v: install RabbitMQ (apt-get install rabbitmq-server) or set %s", err, EnvRabbitMQServer))
	}
	for _, v := range []string{cfg.CertFile, cfg.KeyFile, cfg.CAFile, cfg.User, cfg.Password} {
		// rabbitmq.conf has no quoting: a value is the rest of its line.
		if v == "" || strings.ContainsAny(v, "\r\n") {
			t.Fatalf("testenv: RabbitTLS needs CertFile, KeyFile, CAFile, User and Password, each on one line")
		}
	}
	// A port can be taken between freePort and the node's bind; a node
	// that lost that race gets new ports.
	for attempt := 1; ; attempt++ {
		n, log, err := startRabbit(t, server, cfg)
		if err == nil {
			return n
		}
		if !portTaken(err, log) || attempt == 3 {
			t.Fatalf("testenv: %v", err)
		}
	}
}

// portTaken reports whether a node failed to start because one of its
// ports was taken: its listener's bind ("eaddrinuse", in its log) or the
// distribution port, which the node checks before it opens its log (the
// error then quotes its standard output).
func portTaken(err error, log string) bool {
	return strings.Contains(lastLines(log, 200), "eaddrinuse") ||
		strings.Contains(err.Error(), "eaddrinuse") ||
		strings.Contains(err.Error(), "dist_port_already_used")
}

// rabbitServer finds RabbitMQ's own rabbitmq-server script. Debian's
// /usr/sbin/rabbitmq-server is a wrapper that runs it as the rabbitmq user
// and sends its output elsewhere, so the script it wraps comes first.
func rabbitServer() (string, error) {
	if p := os.Getenv(EnvRabbitMQServer); p != "" {
		if !isExecutable(p) {
			return "", fmt.Errorf("%s=%s is not an executable file", EnvRabbitMQServer, p)
		}
		return p, nil
	}
	if p := "/usr/lib/rabbitmq/bin/rabbitmq-server"; isExecutable(p) {
		return p, nil
	}
	p, err := exec.LookPath("rabbitmq-server")
	if err != nil {
		return "", fmt.Errorf("rabbitmq-server is not in PATH nor in /usr/lib/rabbitmq/bin")
	}
	return p, nil
}

// startRabbit makes a node's directory, starts the node and waits until it
// takes clients. It returns the node's log for the caller to read on error.
func startRabbit(t testing.TB, server string, cfg RabbitTLSConfig) (*RabbitNode, string, error) {
	dir := t.TempDir()
	log := filepath.Join(dir, "rabbit.log")
	ssl, err := freePort()
	if err != nil {
		return nil, log, fmt.Errorf("finding a free port: %w", err)
	}
	dist, err := freePort()
	if err != nil {
		return nil, log, fmt.Errorf("finding a free port: %w", err)
	}
	verify := "ssl_options.verify = verify_none\nssl_options.fail_if_no_peer_cert = false\n"
	if cfg.VerifyClients {
		verify = "ssl_options.verify = verify_peer\nssl_options.fail_if_no_peer_cert = true\n"
	}
	conf := fmt.Sprintf(`listeners.tcp = none
listeners.ssl.default = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
%sdefault_vhost = /
default_user = %s
default_pass = %s
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
`, ssl, cfg.CAFile, cfg.CertFile, cfg.KeyFile, verify, cfg.User, cfg.Password)
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		return path
	}
	var random [4]byte
	_, _ = rand.Read(random[:])
	name := "herald-tls-" + hex.EncodeToString(random[:]) + "@localhost"
	env := append(rabbitFreeEnviron(),
		// Erlang reads and writes its cookie in HOME.
		"HOME="+dir,
		"RABBITMQ_NODENAME="+name,
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", dist),
		// Not /etc/rabbitmq's files: an empty environment file, no
		// advanced.config, no plugins (so no management listener).
		"RABBITMQ_CONF_ENV_FILE="+write("rabbitmq-env.conf", ""),
		"RABBITMQ_CONFIG_FILE="+write("rabbitmq.conf", conf),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+write("enabled_plugins", "[].\n"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+dir,
		"RABBITMQ_LOGS="+log,
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "rabbit.pid"),
		// The script then replaces itself with the Erlang VM, instead of
		// staying as its parent: the process started here is the node, and
		// the VM halts when its input ends (see RabbitTLS).
		"RABBITMQ_ALLOW_INPUT=true",
		// Erlang distribution (the node's name with epmd, its port) on
		// loopback only.
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
	)
	out, err := os.OpenFile(filepath.Join(dir, "stdout.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer out.Close()
	in, stdin, err := os.Pipe()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer in.Close()
	cmd := exec.Command(server)
	cmd.Dir, cmd.Env = dir, env
	// *os.Files are handed to the child as they are; other readers and
	// writers would need copying goroutines, which goleak would report.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, out
	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		_ = stdin.Close()
		t.Fatalf("testenv: starting %s: %v", server, err)
	}
	n := &RabbitNode{Addr: fmt.Sprintf("127.0.0.1:%d", ssl), Name: name, cmd: cmd, stdin: stdin}
	t.Cleanup(n.stop)
	if err := n.await(log, filepath.Join(dir, "stdout.log")); err != nil {
		n.stop()
		return nil, log, err
	}
	n.Boot = time.Since(started)
	return n, log, nil
}

// rabbitFreeEnviron is the test binary's environment without what would
// point the node at the machine's node or configuration.
func rabbitFreeEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RABBITMQ_") || strings.HasPrefix(kv, "HOME=") ||
			strings.HasPrefix(kv, "ERL_FLAGS=") || strings.HasPrefix(kv, "ERL_ZFLAGS=") ||
			strings.HasPrefix(kv, "ERL_AFLAGS=") || strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// await waits until the node logs that it takes clients.
func (n *RabbitNode) await(log, stdout string) error {
	deadline := time.Now().Add(rabbitStartTimeout)
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), rabbitReady) {
			return nil
		}
		if n.exited() {
			return fmt.Errorf("RabbitMQ node %s exited during startup:\n%s\n%s", n.Name, lastLines(stdout, 20), lastLines(log, 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("RabbitMQ node %s not ready after %s:\n%s", n.Name, rabbitStartTimeout, lastLines(log, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited reports, without blocking, whether the node has exited.
func (n *RabbitNode) exited() bool {
	pid := n.cmd.Process.Pid
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
	if got == pid || errors.Is(err, syscall.ECHILD) {
		n.reaped = true
		_ = n.cmd.Process.Release()
		return true
	}
	return false
}

// stop kills the node's process group (the VM and the helpers it started)
// and reaps the VM. Nothing of the node needs to survive it.
func (n *RabbitNode) stop() {
	if n.stdin != nil {
		_ = n.stdin.Close()
		n.stdin = nil
	}
	if n.reaped {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.reaped = true
}
