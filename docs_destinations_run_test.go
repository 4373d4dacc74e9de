package herald_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The destination pages (docs/destinations/) each end with a block a
// reader runs against a broker on their own machine: migrate, insert one
// event with psql, run `herald relay`, and read the event with the
// broker's own client. The test runs each block against a broker of its
// own (or, for RabbitMQ, a vhost of its own on the machine's broker): the
// URLs the block names ("localhost:6379") are rewritten to the test's,
// and the block must still name them, so that it can never reach a
// reader's real broker or AWS.
//
// A reader runs the relay in one shell and the reading command in a
// second one once the relay has published. The test does the same: the
// block up to its `herald relay` line runs in the background, and the
// lines after it (with the block's exports) run again until what they
// print is what the page says, or two minutes pass. Then the relay gets
// SIGTERM and must exit 0.

// relayBlock is how the test runs one destination page's block.
type relayBlock struct {
	// tools are the programs the block runs besides herald, psql and bash.
	tools []string
	// start starts the broker in dir and returns the rewrites of the
	// block's URLs (each must be in the block) and environment settings.
	start func(t *testing.T, dir string) (rewrites [][2]string, env []string)
	// read says what is wrong with what the reading lines printed, nil
	// when it is what the page says, errNotYet when they read no event.
	read func(out string) error
}

var relayBlocks = map[string]relayBlock{
	"redis-relay":    {tools: []string{"redis-server", "redis-cli"}, start: startDocsRedis, read: readRedisEntry},
	"mqtt-relay":     {tools: []string{"mosquitto_sub"}, start: startDocsMosquitto, read: readMQTTMessage},
	"sqs-relay":      {tools: []string{"aws"}, start: startDocsMoto, read: readSQSMessage},
	"rabbitmq-relay": {tools: []string{"rabbitmqadmin"}, start: startDocsRabbitVhost, read: readRabbitMessage},
}

// runRelayBlock returns the runner of the destination block name.
func runRelayBlock(name string) func(t *testing.T, blocks []markedBlock, herald func(*testing.T) string) {
	return func(t *testing.T, blocks []markedBlock, herald func(*testing.T) string) {
		spec := relayBlocks[name]
		testenv.Long(t) // builds the herald command
		for _, tool := range append([]string{"bash", "psql"}, spec.tools...) {
			if _, err := exec.LookPath(tool); err != nil {
				testenv.Unavailable(t, fmt.Sprintf("%s is not installed: %s:%d runs it", tool, blocks[0].file, blocks[0].line))
			}
		}
		require.Len(t, blocks, 1, "one block is named %s", name)
		b := blocks[0]
		relay, read, err := splitRelayBlock(b.text)
		require.NoError(t, err, "%s:%d", b.file, b.line)

		dir := t.TempDir()
		dsn := ownDatabase(t)
		rewrites, env := spec.start(t, dir)
		requireRewrites(t, b, rewrites)
		relay, read = rewriteBlock(pointAtTestServers(relay), rewrites), rewriteBlock(read, rewrites)
		bin := herald(t)

		pids := filepath.Join(dir, "background.pids")
		script := shellScript(relay, []string{"herald relay"})
		reader := "set -euo pipefail\n" + exportLines(relay) + read
		t.Logf("running %s:%d as:\n%s\nthen, until it prints the event:\n%s", b.file, b.line, script, reader)
		env = append(docsShellEnv(bin, dir), append(env, "DATABASE_URL="+dsn, "HERALD_DOCS_PIDS="+pids)...)

		out := &testenv.LogBuffer{}
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so that cleanup reaches the background commands
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // gone already when the test passed
			if err := <-exited; err != nil {
				t.Logf("the block's shell: %v", err)
			}
		})

		readUntil(t, reader, dir, env, spec.read, exited, out)
		stopBackground(t, pids, exited, out)
	}
}

// splitRelayBlock splits a block after its one `herald relay` command:
// what runs in the relay's shell, and the reading lines after it.
func splitRelayBlock(block string) (relay, read string, err error) {
	lines := strings.Split(strings.TrimRight(block, "\n"), "\n")
	at := -1
	for i := 0; i < len(lines); i++ {
		first := strings.TrimSpace(lines[i])
		for strings.HasSuffix(lines[i], `\`) && i+1 < len(lines) {
			i++ // a command continued on the next line
		}
		if first == "herald relay" || strings.HasPrefix(first, "herald relay ") {
			if at >= 0 {
				return "", "", errors.New("the block runs herald relay twice: a reader runs one relay and reads in a second shell")
			}
			at = i
		}
	}
	if at < 0 {
		return "", "", errors.New("the block runs no herald relay")
	}
	rest := strings.Join(lines[at+1:], "\n")
	if strings.TrimSpace(rest) == "" {
		return "", "", errors.New("nothing follows herald relay: the block must read the event with the broker's client")
	}
	return strings.Join(lines[:at+1], "\n") + "\n", rest + "\n", nil
}

// rewriteBlock replaces each rewrite's first string with its second.
func rewriteBlock(block string, rewrites [][2]string) string {
	for _, r := range rewrites {
		block = strings.ReplaceAll(block, r[0], r[1])
	}
	return block
}

// requireRewrites checks that the block names every server the test
// points at its own: a block that stopped naming one would reach the
// reader's broker (or AWS) instead.
func requireRewrites(t *testing.T, b markedBlock, rewrites [][2]string) {
	t.Helper()
	for _, r := range rewrites {
		require.Containsf(t, b.text, r[0], "%s:%d: the block no longer names %s, which the test points at its own server", b.file, b.line, r[0])
	}
}

// exportLines are the export commands of a block, for the reader's shell.
func exportLines(block string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), "export ") {
			b.WriteString(sc.Text() + "\n")
		}
	}
	return b.String()
}

// docsShellEnv is a fresh user's environment for a block: herald first
// on PATH, HOME a directory of the test's own (no ~/.aws, no
// ~/.rabbitmqadmin.conf of the developer's), and none of the developer's
// HERALD_* or cloud settings.
func docsShellEnv(bin, home string) []string {
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + home}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH", name == "HOME", name == "DATABASE_URL", name == "NATS_URL",
			strings.HasPrefix(name, "HERALD_"), strings.HasPrefix(name, "AWS_"),
			strings.HasPrefix(name, "PUBSUB_"), strings.HasPrefix(name, "GOOGLE_"):
		default:
			env = append(env, kv)
		}
	}
	return env
}

// readUntil runs the reading lines until read accepts what they print,
// for up to two minutes; the relay's shell must still be running.
func readUntil(t *testing.T, reader, dir string, env []string, read func(string) error,
	exited chan error, out *testenv.LogBuffer) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute) // a cold relay on a busy machine
	var last string
	lastErr := errors.New("the reading lines never ran")
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the relay's shell ended before the event was read (%v):\n%s", err, out)
		default:
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		stdout, stderr := &testenv.LogBuffer{}, &testenv.LogBuffer{}
		cmd := exec.CommandContext(ctx, "bash", "-c", reader)
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, stdout, stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		err := cmd.Run()
		cancel()
		last = fmt.Sprintf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
		if err != nil {
			lastErr = fmt.Errorf("the reading lines failed: %w", err)
		} else if lastErr = read(stdout.String()); lastErr == nil {
			return
		} else if !errors.Is(lastErr, errNotYet) {
			t.Fatalf("the event read is not what the page says: %v\n%s\nthe relay's shell:\n%s", lastErr, last, out)
		}
		time.Sleep(250 * time.Millisecond) // the relay has not published yet
	}
	t.Fatalf("the event was not read within 2 minutes: %v\n%s\nthe relay's shell:\n%s", lastErr, last, out)
}

// stopBackground sends SIGTERM to the block's background commands (the
// relay, which "keeps relaying until it is signalled") and requires a
// clean exit.
func stopBackground(t *testing.T, pids string, exited chan error, out *testenv.LogBuffer) {
	t.Helper()
	data, err := os.ReadFile(pids)
	require.NoError(t, err, "no background command was started:\n%s", out)
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGTERM))
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		require.NoError(t, err, "the block failed after SIGTERM:\n%s", out)
	case <-time.After(time.Minute):
		t.Fatalf("the relay did not stop within a minute of SIGTERM:\n%s", out)
	}
}

// startProcess starts a server of the test's own, its output in dir, and
// kills it when the test ends.
func startProcess(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, filepath.Base(name)+".log"))
	require.NoError(t, err)
	defer logf.Close()
	cmd := exec.Command(name, args...)
	// *os.Files go to the child as they are: no copying goroutine.
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
}

// awaitListening waits until addr takes TCP connections.
func awaitListening(t *testing.T, dir, addr, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 30*time.Second, 20*time.Millisecond, "%s did not start on %s (its log is in %s)", what, addr, dir)
}

// startDocsRedis starts a Redis of the test's own for the block's
// redis://localhost:6379.
func startDocsRedis(t *testing.T, dir string) ([][2]string, []string) {
	addr := testenv.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	startProcess(t, dir, "redis-server", "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", dir)
	awaitListening(t, dir, addr, "redis-server")
	return [][2]string{{"redis://localhost:6379", "redis://" + addr}}, nil
}

// startDocsMosquitto starts a Mosquitto of the test's own for the
// block's mqtt://localhost:1883.
func startDocsMosquitto(t *testing.T, dir string) ([][2]string, []string) {
	bin, err := exec.LookPath("mosquitto")
	if err != nil {
		bin = "/usr/sbin/mosquitto" // Debian's package puts it out of a user's PATH
		if _, statErr := os.Stat(bin); statErr != nil {
			testenv.Unavailable(t, "mosquitto is not installed (apt-get install mosquitto): the MQTT page's block needs a broker")
		}
	}
	addr := testenv.FreeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	conf := "listener " + port + " 127.0.0.1\nallow_anonymous true\npersistence false\n"
	if os.Geteuid() == 0 {
		conf += "user root\n" // else it switches to the mosquitto user
	}
	path := filepath.Join(dir, "mosquitto.conf")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
	startProcess(t, dir, bin, "-c", path)
	awaitListening(t, dir, addr, "mosquitto")
	return [][2]string{{"mqtt://localhost:1883", "mqtt://" + addr}}, nil
}

// startDocsMoto starts moto_server for the block's http://localhost:5000
// (moto_server's default address).
func startDocsMoto(t *testing.T, _ string) ([][2]string, []string) {
	m := testenv.Moto(t)
	return [][2]string{{"http://localhost:5000", m.URL}}, nil
}

// The machine's RabbitMQ, and its management API, which rabbitmqadmin
// calls.
const (
	docsRabbitAddr = "127.0.0.1:5672"
	docsRabbitAPI  = "http://127.0.0.1:15672/api"
)

// startDocsRabbitVhost makes a vhost of the test's own on the machine's
// RabbitMQ, where the block's amqp://...@localhost:5672/ publishes and
// its rabbitmqadmin reads (through ~/.rabbitmqadmin.conf in the block's
// HOME), and deletes it when the test ends.
func startDocsRabbitVhost(t *testing.T, dir string) ([][2]string, []string) {
	if c, err := net.DialTimeout("tcp", docsRabbitAddr, 2*time.Second); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("RabbitMQ is not reachable at %s (%v); start it with `rabbitmq-server -detached`", docsRabbitAddr, err))
	} else {
		_ = c.Close()
	}
	api := func(method, path, body string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, docsRabbitAPI+path, strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.SetBasicAuth("guest", "guest")
		req.Close = true // no idle connection left behind for goleak
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if _, err := api(http.MethodGet, "/overview", ""); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("RabbitMQ's management API, which rabbitmqadmin calls, is not reachable at %s (%v); "+
			"enable it with `rabbitmq-plugins enable rabbitmq_management`", docsRabbitAPI, err))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	vhost := "herald-docs-" + hex.EncodeToString(b[:])
	for _, call := range []struct{ method, path, body string }{
		{http.MethodPut, "/vhosts/" + vhost, ""},
		{http.MethodPut, "/permissions/" + vhost + "/guest", `{"configure":".*","write":".*","read":".*"}`},
	} {
		code, err := api(call.method, call.path, call.body)
		require.NoError(t, err)
		require.Containsf(t, []int{http.StatusCreated, http.StatusNoContent}, code, "%s %s", call.method, call.path)
	}
	t.Cleanup(func() {
		if code, err := api(http.MethodDelete, "/vhosts/"+vhost, ""); err != nil || code != http.StatusNoContent {
			t.Errorf("deleting vhost %s: %d %v", vhost, code, err)
		}
	})
	conf := "[default]\nhostname = 127.0.0.1\nport = 15672\nvhost = " + vhost + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".rabbitmqadmin.conf"), []byte(conf), 0o600))
	return [][2]string{{"@localhost:5672/", "@" + docsRabbitAddr + "/" + vhost}}, nil
}

// errNotYet is a reading that found no event: the relay has not
// published it yet.
var errNotYet = errors.New("no event yet")

// readRedisEntry reads redis-cli's XRANGE output: the entry's id, then
// its fields and values, one a line.
func readRedisEntry(out string) error {
	if strings.TrimSpace(out) == "" {
		return errNotYet // XRANGE of a stream that does not exist yet
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !regexp.MustCompile(`^[0-9]+-[0-9]+$`).MatchString(lines[0]) {
		return fmt.Errorf("no stream entry in %q", out)
	}
	fields := map[string]string{}
	for i := 1; i+1 < len(lines); i += 2 {
		fields[lines[i]] = lines[i+1]
	}
	return wantFields(fields, map[string]string{"topic": "orders.placed", "key": "order-42", "event_version": "1",
		"payload": `{"total":4200}`}, "id")
}

// readMQTTMessage reads mosquitto_sub's -F '%t %p\n%P': the topic name
// and the payload, then the user properties as NAME:VALUE.
func readMQTTMessage(out string) error {
	if strings.TrimSpace(out) == "" {
		return errNotYet
	}
	topicLine, props, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if topicLine != `orders/placed {"total":4200}` {
		return fmt.Errorf("the topic and payload are %q, not orders/placed {\"total\":4200}", topicLine)
	}
	fields := map[string]string{}
	for _, p := range strings.Fields(props) {
		name, value, _ := strings.Cut(p, ":")
		fields[name] = value
	}
	return wantFields(fields, map[string]string{"Herald-Topic": "orders.placed", "Herald-Key": "order-42",
		"Herald-Event-Version": "1"}, "Herald-Id")
}

// readSQSMessage reads aws sqs receive-message's JSON.
func readSQSMessage(out string) error {
	var got struct {
		Messages []struct {
			Body              string
			MessageAttributes map[string]struct{ StringValue string }
		}
	}
	if strings.TrimSpace(out) == "" {
		return errNotYet // the aws CLI prints nothing when no message came
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got.Messages) != 1 {
		return fmt.Errorf("not one message in %q (%v)", out, err)
	}
	m := got.Messages[0]
	fields := map[string]string{"body": m.Body}
	for name, a := range m.MessageAttributes {
		fields[name] = a.StringValue
	}
	return wantFields(fields, map[string]string{"body": `{"total":4200}`, "Herald-Topic": "orders.placed",
		"Herald-Key": "order-42", "Herald-Event-Version": "1"}, "Herald-Id")
}

// readRabbitMessage reads rabbitmqadmin -f pretty_json get's JSON.
func readRabbitMessage(out string) error {
	var got []struct {
		Payload    string `json:"payload"`
		RoutingKey string `json:"routing_key"`
		Properties struct {
			MessageID    string            `json:"message_id"`
			DeliveryMode int               `json:"delivery_mode"`
			Headers      map[string]string `json:"headers"`
		} `json:"properties"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		return fmt.Errorf("not rabbitmqadmin's JSON: %q (%v)", out, err)
	}
	switch len(got) {
	case 0:
		return errNotYet
	case 1:
	default:
		return fmt.Errorf("%d messages, not one: %q", len(got), out)
	}
	m := got[0]
	fields := map[string]string{"payload": m.Payload, "routing_key": m.RoutingKey,
		"delivery_mode": strconv.Itoa(m.Properties.DeliveryMode), "message_id": m.Properties.MessageID}
	for name, v := range m.Properties.Headers {
		fields[name] = v
	}
	if err := wantFields(fields, map[string]string{"payload": `{"total":4200}`, "routing_key": "orders.placed",
		"delivery_mode": "2", "Herald-Topic": "orders.placed", "Herald-Key": "order-42", "Herald-Event-Version": "1"},
		"Herald-Id"); err != nil {
		return err
	}
	if m.Properties.MessageID != m.Properties.Headers["Herald-Id"] {
		return fmt.Errorf("message_id %q is not the Herald-Id header %q", m.Properties.MessageID, m.Properties.Headers["Herald-Id"])
	}
	return nil
}

// wantFields says which field of got differs from want, or which of
// present is missing.
func wantFields(got, want map[string]string, present ...string) error {
	for name, v := range want {
		if got[name] != v {
			return fmt.Errorf("%s is %q, not %q (all: %v)", name, got[name], v, got)
		}
	}
	for _, name := range present {
		if got[name] == "" {
			return fmt.Errorf("no %s (all: %v)", name, got)
		}
	}
	return nil
}

func TestDocsRelayBlocksSplitAfterTheRelay(t *testing.T) {
	t.Parallel()
	relay, read, err := splitRelayBlock("export A=1\nherald migrate\nherald relay \\\n  --publisher x   # runs\nredis-cli XRANGE s - +\n")
	require.NoError(t, err)
	require.Equal(t, "export A=1\nherald migrate\nherald relay \\\n  --publisher x   # runs\n", relay)
	require.Equal(t, "redis-cli XRANGE s - +\n", read)
	require.Equal(t, "export A=1\n", exportLines(relay))

	for block, says := range map[string]string{
		"herald migrate\n":                                  "runs no herald relay",
		"herald relay --publisher x\n\n":                    "nothing follows herald relay",
		"herald relay --publisher x\nherald relay --y\nz\n": "runs herald relay twice",
	} {
		_, _, err := splitRelayBlock(block)
		require.ErrorContains(t, err, says, block)
	}
}
