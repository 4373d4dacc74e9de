package herald_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// What a user is told to run, a test runs. A fenced block of the docs
// preceded by a marker line is checked by a test of this package:
//
//	<!-- runnable: NAME -->   a shell block run by TestDocsRunnableBlocksRun
//	<!-- example: NAME -->    a Go block that must be the code of the example
//	                          function NAME (TestDocsGoSnippetsAreExamples)

// markedBlock is a fenced block of a Markdown file with a marker before it.
type markedBlock struct {
	file string
	line int    // of the fence's first line of content
	kind string // "runnable" or "example"
	name string
	lang string // the fence's info string
	text string
}

var markerRE = regexp.MustCompile(`^<!-- (runnable|example): ([A-Za-z0-9_./-]+) -->$`)

// markedBlocks returns the marked blocks of files, in order. A marker not
// followed by a fence is an error, so a marker cannot drift off its block.
func markedBlocks(files []string) ([]markedBlock, error) {
	var out []markedBlock
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		lines := strings.Split(string(data), "\n")
		for i := 0; i < len(lines); i++ {
			m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
			if m == nil {
				if strings.Contains(lines[i], "<!-- runnable:") || strings.Contains(lines[i], "<!-- example:") {
					return nil, fmt.Errorf("%s:%d: malformed marker %q: want <!-- runnable: NAME --> or <!-- example: NAME -->", file, i+1, lines[i])
				}
				continue
			}
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				return nil, fmt.Errorf("%s:%d: marker %q is not on the line before a ``` fence", file, i+1, lines[i])
			}
			b := markedBlock{file: file, line: i + 3, kind: m[1], name: m[2], lang: strings.TrimPrefix(lines[i+1], "```")}
			var body []string
			j := i + 2
			for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				body = append(body, lines[j])
			}
			if j == len(lines) {
				return nil, fmt.Errorf("%s:%d: the block after the marker is never closed", file, i+1)
			}
			b.text = strings.Join(body, "\n") + "\n"
			out = append(out, b)
			i = j
		}
	}
	return out, nil
}

// runnableFiles are the pages whose runnable blocks are run: the README's
// quick starts and the manual, its destination pages included.
func runnableFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, pattern := range []string{"docs/*.md", "docs/destinations/*.md"} {
		docs, err := filepath.Glob(filepath.FromSlash(pattern))
		require.NoError(t, err)
		files = append(files, docs...)
	}
	return files
}

// runners run each name of runnable block; a marker with no runner fails,
// so that marking a block is never mistaken for testing it. herald builds
// ./cmd/herald once for all of them and returns the directory that holds
// it.
var runners = map[string]func(t *testing.T, blocks []markedBlock, herald func(*testing.T) string){
	"daemon-quickstart": runDaemonQuickStart,
	"backfill":          runBackfillBlock,
	"redis-relay":       runRelayBlock("redis-relay"),
	"mqtt-relay":        runRelayBlock("mqtt-relay"),
	"sqs-relay":         runRelayBlock("sqs-relay"),
	"rabbitmq-relay":    runRelayBlock("rabbitmq-relay"),
}

func TestDocsRunnableBlocksRun(t *testing.T) {
	t.Parallel()
	blocks, err := markedBlocks(runnableFiles(t))
	require.NoError(t, err)
	byName := map[string][]markedBlock{}
	var names []string
	for _, b := range blocks {
		if b.kind != "runnable" {
			continue
		}
		require.Containsf(t, []string{"sh", "bash", "shell"}, b.lang, "%s:%d: a runnable block is a shell block", b.file, b.line)
		if byName[b.name] == nil {
			names = append(names, b.name)
		}
		byName[b.name] = append(byName[b.name], b)
	}
	require.Contains(t, names, "daemon-quickstart", "README.md's daemon quick start is no longer marked <!-- runnable: daemon-quickstart -->")
	for name := range relayBlocks {
		require.Containsf(t, names, name, "no page marks a block <!-- runnable: %s --> any more: drop its runner, or mark the block again", name)
	}
	// Built once, on the first runner's demand, into the parent's
	// directory, which outlives the parallel subtests.
	binDir := t.TempDir()
	build := sync.OnceValue(func() error {
		out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "herald"), "./cmd/herald").CombinedOutput()
		if err != nil {
			return fmt.Errorf("building ./cmd/herald: %w: %s", err, out)
		}
		return nil
	})
	herald := func(t *testing.T) string {
		t.Helper()
		require.NoError(t, build())
		return binDir
	}
	for _, name := range names {
		run, ok := runners[name]
		require.Truef(t, ok, "%s:%d: no runner for <!-- runnable: %s -->: add one to runners in docs_run_test.go",
			byName[name][0].file, byName[name][0].line, name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run(t, byName[name], herald)
		})
	}
}

// runDaemonQuickStart runs the daemon quick start as a user would, with
// herald built from ./cmd/herald on PATH, psql and bash: against a
// database of the test's own and an embedded NATS JetStream server. The
// blocks name "your" servers with URLs (postgres://..., nats://...): each
// such URL becomes ${DATABASE_URL} or ${NATS_URL}, which the test sets. The
// relay runs in the background until a nats.go consumer (not Herald) has
// read the event the README says it publishes; then it gets SIGTERM and
// must exit 0.
func runDaemonQuickStart(t *testing.T, blocks []markedBlock, herald func(*testing.T) string) {
	testenv.Long(t) // builds the herald command
	for _, tool := range []string{"bash", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, tool+" is not installed: the daemon quick start runs it (apt-get install bash postgresql-client)")
		}
	}
	dsn := ownDatabase(t)
	ns := testenv.NATS(t)
	bin := herald(t)

	var text strings.Builder
	for _, b := range blocks {
		text.WriteString(b.text)
	}
	script := shellScript(pointAtTestServers(text.String()), []string{"herald relay"})
	dir := t.TempDir()
	pids := filepath.Join(dir, "background.pids")
	t.Logf("running %s:%d as:\n%s", blocks[0].file, blocks[0].line, script)

	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"DATABASE_URL=" + dsn, "NATS_URL=" + ns.URL(), "HERALD_DOCS_PIDS=" + pids}
	for _, kv := range os.Environ() {
		// A fresh user's shell: no HERALD_* setting of the developer's, no
		// placeholder variable from elsewhere.
		name, _, _ := strings.Cut(kv, "=")
		if name != "PATH" && name != "DATABASE_URL" && name != "NATS_URL" && !strings.HasPrefix(name, "HERALD_") {
			env = append(env, kv)
		}
	}
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
			t.Logf("the quick start's shell: %v", err) // killed above when the test failed
		}
	})

	msg := readRelayedEvent(t, ns.URL(), exited, out)
	// What the README says of the event, after the block.
	require.Equal(t, "orders.placed", msg.Subject())
	require.JSONEq(t, `{"total":4200}`, string(msg.Data()))
	h := msg.Headers()
	require.NotEmpty(t, h.Get("Herald-Id"))
	require.Equal(t, h.Get("Herald-Id"), h.Get("Nats-Msg-Id"))
	require.Equal(t, "order-42", h.Get("Herald-Key"))
	require.Equal(t, "1", h.Get("Herald-Event-Version"))
	require.Equal(t, "orders.placed", h.Get("Herald-Topic"))

	// "keeps relaying until it is signalled": SIGTERM, then a clean exit.
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
		require.NoError(t, err, "the quick start failed after SIGTERM:\n%s", out)
	case <-time.After(time.Minute):
		t.Fatalf("the relay did not stop within a minute of SIGTERM:\n%s", out)
	}
}

// runBackfillBlock runs docs/backfill.md's block as a user would, with
// herald on PATH, psql and bash, against a database of the test's own,
// then checks what the page says the commands print and write.
func runBackfillBlock(t *testing.T, blocks []markedBlock, herald func(*testing.T) string) {
	testenv.Long(t) // builds the herald command
	for _, tool := range []string{"bash", "psql"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Unavailable(t, tool+" is not installed: the backfill page runs it (apt-get install bash postgresql-client)")
		}
	}
	dsn := ownDatabase(t)
	bin := herald(t)
	var text strings.Builder
	for _, b := range blocks {
		text.WriteString(b.text)
	}
	cmd := exec.Command("bash", "-c", shellScript(pointAtTestServers(text.String()), nil))
	cmd.Env = []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "DATABASE_URL=" + dsn, "HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "dry run: backfill orders-snapshot would write 3 events to topic orders.snapshot from orders, "+
		"from the first row, in batches of 500; nothing written")
	require.Contains(t, string(out), "backfill orders-snapshot done: 3 rows (3 this run) in 1 batches, ")

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT topic, key, convert_from(payload, 'UTF8'), headers->>'Herald-Backfill' FROM herald_outbox ORDER BY seq`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var topic, key, payload, mark string
		require.NoError(t, rows.Scan(&topic, &key, &payload, &mark))
		got = append(got, topic+" "+key+" "+mark)
		if key == "1" {
			require.JSONEq(t, `{"id": 1, "status": "paid", "total": 100}`, payload)
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"orders.snapshot 1 orders-snapshot", "orders.snapshot 2 orders-snapshot", "orders.snapshot 3 orders-snapshot"}, got)
}

// readRelayedEvent reads the first message of the stream ORDERS, which the
// relay creates, as the README's nats.go snippet does. It fails as soon as
// the script exits, since the relay should still be running.
func readRelayedEvent(t *testing.T, natsURL string, exited chan error, out *testenv.LogBuffer) jetstream.Msg {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	deadline := time.Now().Add(2 * time.Minute) // a cold relay under -race on a busy machine
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the quick start ended before the event was read (%v):\n%s", err, out)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cons, err := js.OrderedConsumer(ctx, "ORDERS", jetstream.OrderedConsumerConfig{})
		cancel()
		if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, context.DeadlineExceeded) {
			time.Sleep(100 * time.Millisecond) // the relay has not created the stream yet
			continue
		}
		require.NoError(t, err)
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		require.NoError(t, err)
		return msg
	}
	t.Fatalf("no event on the stream ORDERS within 2 minutes:\n%s", out)
	return nil
}

// ownDatabase creates a database for the test and returns its DSN, a URL
// on PostgresDSN's server: the quick start's commands use the default
// schema, public, so a schema of the test's own would not isolate them.
func ownDatabase(t *testing.T) string {
	t.Helper()
	base := testenv.PostgresDSN(t)
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s must be a postgres:// URL for the quick start's test (psql takes it as is)", testenv.EnvPostgres)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "herald_docs_" + hex.EncodeToString(b[:])
	run := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql)
		return err
	}
	require.NoError(t, run("CREATE DATABASE "+name))
	t.Cleanup(func() {
		// FORCE (PostgreSQL 13): a relay killed by a failed test may leave
		// a connection behind for a moment.
		if err := run("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	u.Path = "/" + name
	return u.String()
}

var (
	postgresURLRE = regexp.MustCompile(`postgres(?:ql)?://[^\s"'` + "`" + `]+`)
	natsURLRE     = regexp.MustCompile(`nats://[^\s"'` + "`" + `]+`)
)

// pointAtTestServers replaces the servers a block names by URL with the
// variables the test sets. ${...} works quoted and unquoted, and keeps a
// DSN's ? and & away from the shell.
func pointAtTestServers(block string) string {
	block = postgresURLRE.ReplaceAllLiteralString(block, "${DATABASE_URL}")
	return natsURLRE.ReplaceAllLiteralString(block, "${NATS_URL}")
}

// shellScript turns a shell block into a bash script that stops at the
// first failing command. A command that starts with one of background (a
// relay, which runs until signalled) is started in the background, its pid
// appended to the file $HERALD_DOCS_PIDS; the script ends by waiting for
// them, so that it exits with the status of the first that fails.
func shellScript(block string, background []string) string {
	var b strings.Builder
	b.WriteString("set -euo pipefail\n__herald_bg=\n")
	sc := bufio.NewScanner(strings.NewReader(block))
	var cmd []string // the physical lines of one command
	for sc.Scan() {
		cmd = append(cmd, sc.Text())
		if strings.HasSuffix(sc.Text(), `\`) {
			continue // continued on the next line
		}
		first := strings.TrimSpace(cmd[0])
		bg := false
		for _, prefix := range background {
			bg = bg || first == prefix || strings.HasPrefix(first, prefix+" ")
		}
		if bg {
			last := len(cmd) - 1
			cmd[last] = stripComment(cmd[last]) + " &"
			cmd = append(cmd, `__herald_bg="$__herald_bg $!"; echo "$!" >>"$HERALD_DOCS_PIDS"`)
		}
		b.WriteString(strings.Join(cmd, "\n") + "\n")
		cmd = nil
	}
	b.WriteString(strings.Join(cmd, "\n"))
	b.WriteString("for __pid in $__herald_bg; do wait \"$__pid\"; done\n")
	return b.String()
}

// stripComment drops a trailing shell comment from line: a # that starts a
// word outside quotes.
func stripComment(line string) string {
	var quote rune
	escaped := false
	for i, r := range line {
		switch {
		case escaped:
			escaped = false
		case r == '\\' && quote != '\'':
			escaped = true
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
	}
	return line
}

func TestShellScriptRunsRelaysInTheBackground(t *testing.T) {
	t.Parallel()
	block := "export A=1   # a comment\n" +
		"herald relay --publisher x --subjects 'a.#b' \"c \\\" # d\" # runs until signalled\n" +
		"herald relay-ish \\\n  --flag\n" +
		"herald relay \\\n  --publisher y  # the last line\n"
	require.Equal(t, "set -euo pipefail\n__herald_bg=\n"+
		"export A=1   # a comment\n"+
		"herald relay --publisher x --subjects 'a.#b' \"c \\\" # d\" &\n"+
		`__herald_bg="$__herald_bg $!"; echo "$!" >>"$HERALD_DOCS_PIDS"`+"\n"+
		"herald relay-ish \\\n  --flag\n"+
		"herald relay \\\n  --publisher y &\n"+
		`__herald_bg="$__herald_bg $!"; echo "$!" >>"$HERALD_DOCS_PIDS"`+"\n"+
		"for __pid in $__herald_bg; do wait \"$__pid\"; done\n",
		shellScript(block, []string{"herald relay"}))
	require.Equal(t, `psql "${DATABASE_URL}" -c 'x'; herald relay --publisher ${NATS_URL} --x`,
		pointAtTestServers(`psql "postgres://app:secret@localhost:5432/shop?sslmode=disable" -c 'x'; herald relay --publisher nats://localhost:4222 --x`))
}
