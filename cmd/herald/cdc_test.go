package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// childArgsEnv makes this test binary run the herald command with the
// arguments it holds (a JSON array) instead of the tests: a relay the
// test can SIGKILL.
const childArgsEnv = "HERALD_TEST_CHILD_ARGS"

// runChildIfAsked runs the command and exits when this process is a child.
func runChildIfAsked() {
	raw, ok := os.LookupEnv(childArgsEnv)
	if !ok {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", childArgsEnv, err)
		os.Exit(2)
	}
	os.Exit(run(context.Background(), args, os.Stdout, os.Stderr))
}

// child is a herald command run as a process of its own: out is its
// stdout and stderr as they came, stdout and stderr each alone.
type child struct {
	cmd                 *exec.Cmd
	out, stdout, stderr *testenv.LogBuffer
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	return startChildEnv(t, os.Environ(), args...)
}

// startChildEnv runs herald with args in a process whose environment is
// env.
func startChildEnv(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	c := &child{out: &testenv.LogBuffer{}, stdout: &testenv.LogBuffer{}, stderr: &testenv.LogBuffer{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	c.cmd.Env = append(env, childArgsEnv+"="+string(raw))
	c.cmd.Stdout, c.cmd.Stderr = io.MultiWriter(c.out, c.stdout), io.MultiWriter(c.out, c.stderr)
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	_ = c.cmd.Wait()
}

// stop sends SIGTERM and returns the exit code.
func (c *child) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("the relay did not stop on SIGTERM:\n%s", c.out)
	}
	return c.cmd.ProcessState.ExitCode()
}

// cdcWorld is a private cluster with wal_level=logical, a migrated outbox
// and an embedded JetStream with a stream of every cdc.> subject.
type cdcWorld struct {
	pc     *testenv.Cluster // to stop and start the server
	dsn    string
	db     *pgx.Conn
	nats   *testenv.NATSServer
	stream jetstream.Stream
}

func newCDCWorld(t *testing.T) cdcWorld {
	t.Helper()
	pc := testenv.PrivateCluster(t)
	r := cli(t, nil, "migrate", "--db", pc.DSN)
	require.Equal(t, 0, r.code, r)
	db, err := pgx.Connect(context.Background(), pc.DSN)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	ns := testenv.NATS(t)
	stream := ns.CreateStreamConfig(t, jetstream.StreamConfig{Name: "CDC", Subjects: []string{"cdc.>"}, Duplicates: 10 * time.Minute})
	return cdcWorld{pc: pc, dsn: pc.DSN, db: db, nats: ns, stream: stream}
}

func (w cdcWorld) insertState(t *testing.T) string {
	t.Helper()
	var def string
	require.NoError(t, w.db.QueryRow(context.Background(), `SELECT coalesce(column_default, '') FROM information_schema.columns
		WHERE table_schema = 'public' AND table_name = 'herald_outbox' AND column_name = 'state'`).Scan(&def))
	return def
}

func (w cdcWorld) messages(t *testing.T) uint64 {
	t.Helper()
	info, err := w.stream.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}

// payloads reads every message of the stream, in stream order.
func (w cdcWorld) payloads(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cons, err := w.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	require.NoError(t, err)
	want := int(w.messages(t))
	out := make([]string, 0, want)
	for len(out) < want {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			out = append(out, string(m.Data()))
		}
		require.NoError(t, batch.Error())
	}
	return out
}

// A relay reading the WAL is SIGKILLed while it publishes a 50,000-row
// transaction; the next one delivers every event, each key's in commit
// order, and the broker's dedup ids absorb what the first had in flight.
func TestCDCRelayKilledMidTransactionDeliversEverythingInKeyOrder(t *testing.T) {
	testenv.Long(t)
	w := newCDCWorld(t)
	args := []string{"relay", "--db", w.dsn, "--publisher", w.nats.URL(), "--source", "cdc", "--batch-size", "500"}
	first := startChild(t, append(args, "--cdc-create-slot")...)
	require.Eventually(t, func() bool { return strings.Contains(w.insertState(t), "streamed") },
		60*time.Second, 20*time.Millisecond, "the relay makes inserts streamed once its slot exists:\n%s", first.out)

	const rows, keys = 50000, 100
	_, err := w.db.Exec(context.Background(), fmt.Sprintf(`INSERT INTO herald_outbox (topic, key, payload)
		SELECT 'cdc.orders', 'k' || (g %% %d), convert_to('k' || (g %% %d) || ':' || g, 'UTF8')
		FROM generate_series(1, %d) g`, keys, keys, rows))
	require.NoError(t, err)

	require.Eventually(t, func() bool { return w.messages(t) >= 5000 }, 2*time.Minute, 5*time.Millisecond,
		"the first relay publishes:\n%s", first.out)
	first.kill(t)
	require.Less(t, w.messages(t), uint64(rows), "killed midway, not after the end")

	addr := freeAddr(t)
	second := startChild(t, append(args, "--admin-addr", addr)...)
	require.Eventually(t, func() bool { return w.messages(t) >= rows }, 3*time.Minute, 50*time.Millisecond,
		"the second relay delivers the rest:\n%s", second.out)
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/metrics")
		return err == nil && code == 200 && strings.Contains(body, `herald_cdc_slot_active{slot="herald_outbox"} 1`) &&
			strings.Contains(body, `herald_cdc_slot_lag_seconds{slot="herald_outbox"} 0`) &&
			strings.Contains(body, `herald_cdc_slot_wal_status{slot="herald_outbox",status="reserved"} 1`)
	}, 30*time.Second, 20*time.Millisecond, "the slot's metrics: it is read, and every transaction is confirmed")
	require.Equal(t, 0, second.stop(t), second.out.String())
	require.EqualValues(t, rows, w.messages(t), "the redelivered events were dropped by their ids")

	last := map[string]int{}
	seen := map[string]bool{}
	for _, p := range w.payloads(t) {
		key, n, ok := strings.Cut(p, ":")
		require.True(t, ok, p)
		i, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.False(t, seen[p], "%s twice", p)
		seen[p] = true
		require.Greater(t, i, last[key], "key %s: %d came after %d", key, i, last[key])
		last[key] = i
	}
	require.Len(t, seen, rows)

	r := cli(t, nil, "relay", "--db", w.dsn, "--publisher", w.nats.URL())
	require.NotEqual(t, 0, r.code, r)
	require.Contains(t, r.stderr, "is relayed by change-data-capture", "a polling relay refuses the streamed table")

	var pending int
	require.NoError(t, w.db.QueryRow(context.Background(),
		`SELECT count(*) FROM herald_outbox WHERE state <> 'streamed'`).Scan(&pending))
	require.Zero(t, pending, "nothing failed, so nothing was written back to the table")
}

func TestCDCFlagsAreChecked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--source", "wal"}, `--source: "wal" is not poll or cdc`},
		{[]string{"--cdc-slot", "s"}, "--cdc-slot is only used with --source cdc"},
		{[]string{"--cdc-create-slot"}, "--cdc-create-slot is only used with --source cdc"},
		{[]string{"--source", "cdc", "--cdc-slot", "Bad-Name"}, `--cdc-slot: "Bad-Name" must match`},
		{[]string{"--cdc-buffer-bytes", "1048576"}, "--cdc-buffer-bytes is only used with --source cdc"},
		{[]string{"--cdc-standby-interval", "2s"}, "--cdc-standby-interval is only used with --source cdc"},
		{[]string{"--source", "cdc", "--cdc-buffer-bytes", "1000"}, "--cdc-buffer-bytes: 1000 is not between 65536 and 1073741824"},
		{[]string{"--source", "cdc", "--cdc-buffer-bytes", "2147483648"}, "--cdc-buffer-bytes: 2147483648 is not between"},
		{[]string{"--source", "cdc", "--cdc-buffer-bytes", "lots"}, "--cdc-buffer-bytes"},
		{[]string{"--source", "cdc", "--cdc-standby-interval", "1ms"}, "--cdc-standby-interval: 1ms is less than 10ms"},
	} {
		r := cli(t, nil, append([]string{"relay", "--db", "postgres://u@127.0.0.1:1/db", "--publisher", "nats://127.0.0.1:1"}, tc.args...)...)
		require.Equal(t, exitUsage, r.code, r)
		require.Contains(t, r.stderr, tc.want)
	}
	lite := "sqlite:" + t.TempDir() + "/x.db"
	r := cli(t, nil, "migrate", "--db", lite)
	require.Equal(t, 0, r.code, r)
	r = cli(t, nil, "relay", "--db", lite, "--publisher", "nats://127.0.0.1:1", "--source", "cdc")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "--source cdc needs PostgreSQL")
}
