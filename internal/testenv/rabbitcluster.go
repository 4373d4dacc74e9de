//go:build linux || darwin

package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RabbitClusterT is a RabbitMQ cluster of one test's own: nodes of the
// machine's installation on loopback, each with its own ports and data
// directory, sharing an Erlang cookie of the cluster's (not the user's).
// A node keeps its name, ports and data across [RabbitClusterNode.Stop]
// and [RabbitClusterNode.Start], so a stopped node rejoins the cluster
// and clients find it at the same address. The machine's node (rabbit@
// the host, port 5672) is left alone.
type RabbitClusterT struct {
	// Nodes are the cluster's nodes, in the order of their names.
	Nodes []*RabbitClusterNode

	home string // HOME of every node and of rabbitmqctl: the cookie
	ctl  string // rabbitmqctl
}

// RabbitClusterNode is one node of a RabbitClusterT.
type RabbitClusterNode struct {
	// Name is the node's Erlang name, herald-<random>-<i>@localhost.
	Name string
	// Addr is its AMQP listener, 127.0.0.1:PORT; the node has no other.
	Addr string

	c      *RabbitClusterT
	server string
	dir    string
	env    []string
	starts int

	mu     sync.Mutex
	cmd    *exec.Cmd
	stdin  *os.File
	reaped bool
}

// URL is the node's AMQP URL, as the guest user (which RabbitMQ lets in
// over loopback only).
func (n *RabbitClusterNode) URL() string { return "amqp://guest:guest@" + n.Addr + "/" }

// URLs are the nodes' AMQP URLs, comma-separated.
func (c *RabbitClusterT) URLs() string {
	urls := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		urls[i] = n.URL()
	}
	return strings.Join(urls, ",")
}

// Node returns the node of the given Erlang name (a quorum queue's
// leader), or nil.
func (c *RabbitClusterT) Node(name string) *RabbitClusterNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// RabbitCluster starts a RabbitMQ cluster of n nodes of t's own and
// returns once every node runs as a member of it, so that quorum queues
// can be declared with up to n members. The nodes form the cluster as
// they boot (peer discovery from a list in their configuration) and are
// started side by side. They are killed when t ends, as RabbitTLS's node
// is, however the test binary ends. Without RabbitMQ the test skips,
// except with CI=true, where it fails.
func RabbitCluster(t testing.TB, n int) *RabbitClusterT {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: RabbitCluster: %d nodes", n)
	}
	server, err := rabbitServer()
	if err != nil {
		Unavailable(t, fmt.Sprintf("%v: install RabbitMQ (apt-get install rabbitmq-server) or set %s", err, EnvRabbitMQServer))
	}
	ctl := filepath.Join(filepath.Dir(server), "rabbitmqctl")
	if !isExecutable(ctl) {
		if ctl, err = exec.LookPath("rabbitmqctl"); err != nil {
			Unavailable(t, "rabbitmqctl is not next to rabbitmq-server nor in PATH: install RabbitMQ (apt-get install rabbitmq-server)")
		}
	}
	// A port can be taken between freePort and a node's bind: a cluster
	// that lost that race starts again with new ports.
	for attempt := 1; ; attempt++ {
		c, err := startRabbitCluster(t, server, ctl, n)
		if err == nil {
			return c
		}
		if !strings.Contains(err.Error(), "eaddrinuse") && !strings.Contains(err.Error(), "dist_port_already_used") || attempt == 3 {
			t.Fatalf("testenv: RabbitCluster: %v", err)
		}
	}
}

func startRabbitCluster(t testing.TB, server, ctl string, n int) (*RabbitClusterT, error) {
	home := t.TempDir()
	var random [6]byte
	_, _ = rand.Read(random[:])
	id := hex.EncodeToString(random[:])
	// The cluster's own cookie: nodes of other clusters, and the
	// machine's node, cannot talk to these.
	var cookie [16]byte
	_, _ = rand.Read(cookie[:])
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte(hex.EncodeToString(cookie[:])), 0o400); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c := &RabbitClusterT{home: home, ctl: ctl}
	ports := make([][2]int, n)
	for i := range n {
		for j := range 2 {
			p, err := freePort()
			if err != nil {
				return nil, fmt.Errorf("finding a free port: %w", err)
			}
			ports[i][j] = p
		}
		c.Nodes = append(c.Nodes, &RabbitClusterNode{
			Name: fmt.Sprintf("herald-%s-%d@localhost", id, i+1),
			Addr: fmt.Sprintf("127.0.0.1:%d", ports[i][0]),
			c:    c, server: server, dir: t.TempDir(),
		})
	}
	var peers strings.Builder
	for i, node := range c.Nodes {
		fmt.Fprintf(&peers, "cluster_formation.classic_config.nodes.%d = %s\n", i+1, node.Name)
	}
	for i, node := range c.Nodes {
		conf := fmt.Sprintf(`listeners.tcp.default = %s
cluster_formation.peer_discovery_backend = classic_config
%s`, node.Addr, peers.String())
		write := func(name, text string) string {
			path := filepath.Join(node.dir, name)
			if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
				t.Fatalf("testenv: %v", err)
			}
			return path
		}
		node.env = append(rabbitFreeEnviron(),
			"HOME="+home,
			"RABBITMQ_NODENAME="+node.Name,
			fmt.Sprintf("RABBITMQ_DIST_PORT=%d", ports[i][1]),
			"RABBITMQ_CONF_ENV_FILE="+write("rabbitmq-env.conf", ""),
			"RABBITMQ_CONFIG_FILE="+write("rabbitmq.conf", conf),
			"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(node.dir, "advanced.config"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+write("enabled_plugins", "[].\n"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(node.dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+node.dir,
			"RABBITMQ_PID_FILE="+filepath.Join(node.dir, "rabbit.pid"),
			"RABBITMQ_ALLOW_INPUT=true",
			"ERL_EPMD_ADDRESS=127.0.0.1",
			// Loopback only; and schedulers that sleep when idle instead of
			// spinning, as three nodes share the machine's cores with the
			// test.
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1} +sbwt none +sbwtdcpu none +sbwtdio none",
		)
		t.Cleanup(node.kill)
	}
	// Side by side: each node waits for its peers as it boots.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, node := range c.Nodes {
		wg.Go(func() { errs[i] = node.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, node := range c.Nodes {
			node.kill()
		}
		return nil, err
	}
	if err := c.waitMembers(n); err != nil {
		for _, node := range c.Nodes {
			node.kill()
		}
		return nil, err
	}
	return c, nil
}

// rabbitClusterTimeout bounds how long the nodes take to agree on the
// cluster's members after they start.
const rabbitClusterTimeout = 60 * time.Second

// waitMembers waits until the first running node counts want running
// members. A node that boots before its peers can form a cluster of its
// own: that is an error, said with each node's view.
func (c *RabbitClusterT) waitMembers(want int) error {
	deadline := time.Now().Add(rabbitClusterTimeout)
	for {
		var last string
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			running, err := c.runningNodes(n)
			if err != nil {
				last = err.Error()
				break
			}
			if len(running) == want {
				return nil
			}
			last = fmt.Sprintf("%s runs with %v", n.Name, running)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the RabbitMQ cluster has not %d running members after %s: %s", want, rabbitClusterTimeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// WaitRunning waits until every node that runs counts every node that
// runs as a member: after a node's Start, before the test relies on it.
func (c *RabbitClusterT) WaitRunning(t testing.TB) {
	t.Helper()
	want := 0
	for _, n := range c.Nodes {
		if n.Running() {
			want++
		}
	}
	if err := c.waitMembers(want); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// runningNodes returns the running members of the cluster as node n sees
// them.
func (c *RabbitClusterT) runningNodes(n *RabbitClusterNode) ([]string, error) {
	out, err := c.ctl1(n, 30*time.Second, "eval", "rabbit_nodes:all_running().")
	if err != nil {
		return nil, err
	}
	// ['a@localhost','b@localhost']
	var names []string
	for f := range strings.FieldsFuncSeq(out, func(r rune) bool { return strings.ContainsRune("[]', \n", r) }) {
		names = append(names, f)
	}
	slices.Sort(names)
	return names, nil
}

// Ctl runs rabbitmqctl against node n with args (quiet, -q) and returns
// its output; its error holds the output too.
func (c *RabbitClusterT) Ctl(n *RabbitClusterNode, args ...string) (string, error) {
	return c.ctl1(n, 60*time.Second, args...)
}

func (c *RabbitClusterT) ctl1(n *RabbitClusterNode, timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.ctl, append([]string{"-q", "-n", n.Name}, args...)...)
	cmd.Env = append(rabbitFreeEnviron(), "HOME="+c.home, "ERL_EPMD_ADDRESS=127.0.0.1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl -n %s %s: %v: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Running reports whether the node's process runs.
func (n *RabbitClusterNode) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && !n.reaped
}

// Stop stops the node as its service manager would (SIGTERM: RabbitMQ
// shuts down in order, handing its quorum queues' leadership over and
// closing its clients' connections) and waits until it has exited. The
// node keeps its data for Start.
func (n *RabbitClusterNode) Stop(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.reaped {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		_ = n.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(rabbitStartTimeout):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-done
		n.reaped = true
		t.Fatalf("testenv: RabbitMQ node %s did not stop within %s of SIGTERM", n.Name, rabbitStartTimeout)
	}
	n.reaped = true
	// The VM's helpers, if any outlived it.
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	if n.stdin != nil {
		_ = n.stdin.Close()
		n.stdin = nil
	}
}

// Kill kills the node at once (SIGKILL), as a crash or a machine lost
// would. The node keeps its data for Start.
func (n *RabbitClusterNode) Kill(t testing.TB) {
	t.Helper()
	n.kill()
}

// Start starts a stopped node again, with its name, ports and data, and
// waits until it takes clients.
func (n *RabbitClusterNode) Start(t testing.TB) {
	t.Helper()
	if n.Running() {
		t.Fatalf("testenv: RabbitMQ node %s runs already", n.Name)
	}
	if err := n.start(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// start starts the node's process and waits until it takes clients. Each
// start logs to a file of its own, in which it waits for rabbitReady.
func (n *RabbitClusterNode) start() error {
	n.mu.Lock()
	n.starts++
	log := filepath.Join(n.dir, fmt.Sprintf("rabbit-%d.log", n.starts))
	stdoutPath := filepath.Join(n.dir, fmt.Sprintf("stdout-%d.log", n.starts))
	out, err := os.OpenFile(stdoutPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		n.mu.Unlock()
		return err
	}
	defer out.Close()
	in, stdin, err := os.Pipe()
	if err != nil {
		n.mu.Unlock()
		return err
	}
	defer in.Close()
	cmd := exec.Command(n.server)
	cmd.Dir, cmd.Env = n.dir, append(slices.Clip(n.env), "RABBITMQ_LOGS="+log)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, out, out
	attr := &syscall.SysProcAttr{Setpgid: true}
	dieWithParent(attr)
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		_ = stdin.Close()
		n.mu.Unlock()
		return fmt.Errorf("starting %s: %w", n.server, err)
	}
	n.cmd, n.stdin, n.reaped = cmd, stdin, false
	n.mu.Unlock()

	deadline := time.Now().Add(rabbitStartTimeout)
	for {
		b, _ := os.ReadFile(log)
		if strings.Contains(string(b), rabbitReady) {
			return nil
		}
		if n.exited() {
			return fmt.Errorf("RabbitMQ node %s exited during startup:\n%s\n%s", n.Name, lastLines(stdoutPath, 20), lastLines(log, 20))
		}
		if time.Now().After(deadline) {
			n.kill()
			return fmt.Errorf("RabbitMQ node %s not ready after %s:\n%s", n.Name, rabbitStartTimeout, lastLines(log, 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited reports, without blocking, whether the node's process has exited.
func (n *RabbitClusterNode) exited() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reaped {
		return true
	}
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

// kill kills the node's process group and reaps the VM.
func (n *RabbitClusterNode) kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stdin != nil {
		_ = n.stdin.Close()
		n.stdin = nil
	}
	if n.cmd == nil || n.reaped {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	_ = n.cmd.Wait()
	n.reaped = true
}
