package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/smithy-go/logging"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldaws"
	"github.com/herald-outbox/herald/publish/heraldkafka"
)

// startLogChild runs herald as a process of its own, so that what the
// libraries print to the process's stderr is seen, and their process-wide
// loggers are set as the daemon sets them (run). Its environment is this
// process's without Herald's, AWS's and Pub/Sub's variables, and env.
func startLogChild(t *testing.T, env map[string]string, args ...string) *child {
	t.Helper()
	var environ []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(name, "HERALD_") && !strings.HasPrefix(name, "HERALD_TEST_")) ||
			strings.HasPrefix(name, "AWS_") || name == pubsubEmulatorEnv {
			continue
		}
		environ = append(environ, kv)
	}
	for name, v := range env {
		environ = append(environ, name+"="+v)
	}
	return startChildEnv(t, environ, args...)
}

// requireJSONLines checks that every line of text is a JSON object with
// slog's keys, and returns them.
func requireJSONLines(t *testing.T, what, text string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "a line on %s is not JSON: %q\n%s", what, line, text)
		for _, key := range []string{"time", "level", "msg"} {
			require.Contains(t, m, key, "a line on %s has no %s: %q", what, key, line)
		}
		lines = append(lines, m)
	}
	return lines
}

// libs returns the lib attributes of lines.
func libs(lines []map[string]any) []string {
	var out []string
	for _, m := range lines {
		if lib, ok := m["lib"].(string); ok && !contains(out, lib) {
			out = append(out, lib)
		}
	}
	return out
}

// requireOnlyJSONOutput checks the output of a relay run with --log-format
// json: every line on stderr is a JSON object, and stdout holds no more
// than the relay's own result line ("relay stopped ...", which is the
// command's output, not a log). It returns stderr's lines.
func requireOnlyJSONOutput(t *testing.T, c *child) []map[string]any {
	t.Helper()
	lines := requireJSONLines(t, "stderr", c.stderr.String())
	for line := range strings.SplitSeq(strings.TrimRight(c.stdout.String(), "\n"), "\n") {
		if line != "" && !strings.HasPrefix(line, "relay stopped") {
			var m map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &m), "a line on stdout is neither JSON nor the relay's result: %q", line)
		}
	}
	return lines
}

const libLogSecret = "s3cret-Pw-4417"

// A relay run with --log-format json writes nothing but JSON lines while
// its destination is down, whatever the client of that destination is:
// the clients that print to stderr themselves (go-redis, the AWS SDK,
// gRPC) or log through loggers of their own are routed through the
// relay's logger. Each relay runs as a process of its own until it has
// retried its destination at least once.
func TestLibraryLogsAreJSONWhenTheDestinationIsDown(t *testing.T) {
	t.Parallel()
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	aws := map[string]string{"AWS_ACCESS_KEY_ID": "AKIAHERALDTEST", "AWS_SECRET_ACCESS_KEY": libLogSecret,
		"AWS_EC2_METADATA_DISABLED": "true"}
	for _, tc := range []struct {
		name string
		url  func(addr string) string
		env  func(addr string) map[string]string
		// lib is a library whose lines the relay's log must hold, when the
		// library logs anything at all while its broker is down.
		lib string
		// outage is the relay's line that says it retried.
		outage string
	}{
		{name: "NATS", url: func(a string) string { return "nats://herald:" + libLogSecret + "@" + a }},
		{name: "Kafka", url: func(a string) string { return "kafka://" + a }, lib: "franz-go"},
		{name: "RabbitMQ", url: func(a string) string { return "amqp://guest:" + libLogSecret + "@" + a + "/" }},
		{name: "Redis", url: func(a string) string { return "redis://:" + libLogSecret + "@" + a + "/0" }, lib: "go-redis"},
		{name: "MQTT", url: func(a string) string { return "mqtt://" + a }, lib: "paho.golang"},
		{name: "SQS", url: func(a string) string { return "sqs://orders?region=eu-west-1&endpoint=http://" + a },
			env: func(string) map[string]string { return aws }, lib: "aws-sdk-go-v2"},
		{name: "SNS", url: func(a string) string {
			return "sns://orders?region=eu-west-1&account=123456789012&endpoint=http://" + a
		}, env: func(string) map[string]string { return aws }, lib: "aws-sdk-go-v2"},
		{name: "PubSub", url: func(string) string { return "pubsub://herald-cli" },
			env: func(a string) map[string]string { return map[string]string{pubsubEmulatorEnv: a} }, lib: "grpc"},
		{name: "Webhook", url: func(a string) string { return "http://" + a + "/hook" },
			env: func(string) map[string]string {
				return map[string]string{webhookSecretEnv: whsec, webhookAllowEnv: "127.0.0.0/8"}
			}, outage: "destination unreachable; pausing claims"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := setup(t)
			d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES
				('orders', 'o1', 'a'), ('orders', 'o1', 'b'), ('orders', 'o2', 'c')`)
			down := freeAddr(t)
			var env map[string]string
			if tc.env != nil {
				env = tc.env(down)
			}
			c := startLogChild(t, env, append([]string{"relay", "--publisher", tc.url(down),
				"--log-format", "json", "--log-level", "debug", "--poll-interval", "2ms", "--idle-poll-interval", "20ms"},
				d.flags...)...)
			retried := func(stderr string) bool {
				if tc.outage != "" {
					return strings.Contains(stderr, tc.outage)
				}
				// The start's second failed try is logged: the client has
				// tried, failed and logged at least twice.
				return strings.Contains(stderr, `"msg":"waiting for the destination default before relaying"`) &&
					strings.Contains(stderr, `"attempt":2,`)
			}
			require.Eventually(t, func() bool { return retried(c.stderr.String()) }, time.Minute, 20*time.Millisecond,
				"the relay did not log its destination's outage:\n%s", c.stderr)
			c.stop(t)
			lines := requireOnlyJSONOutput(t, c)
			if tc.lib != "" {
				require.Contains(t, libs(lines), tc.lib, "%s's lines go through the relay's logger:\n%s", tc.lib, c.stderr)
			}
			require.NotContains(t, c.stderr.String()+c.stdout.String(), libLogSecret)
		})
	}
}

// go-sql-driver/mysql prints "[mysql] ... packets.go:58 unexpected EOF"
// or "closing bad idle connection" to stderr when the server drops a
// connection under it: a relay on MariaDB whose connections are killed
// while it polls logs that as JSON, through its logger.
func TestMySQLDriverLogsAreJSON(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("mysql", testenv.MySQL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	database := testenv.MySQLDatabase(t, db)
	dsn := testenv.MySQLURL(t, database)
	r := cli(t, nil, "migrate", "--db", dsn)
	require.Equal(t, 0, r.code, r)

	var received atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		received.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(hook.Close)
	env := map[string]string{webhookSecretEnv: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", webhookAllowEnv: "127.0.0.0/8"}
	c := startLogChild(t, env, "relay", "--db", dsn, "--publisher", hook.URL+"/hook",
		"--log-format", "json", "--log-level", "debug", "--poll-interval", "2ms", "--idle-poll-interval", "20ms")
	insert := func() {
		_, err := db.ExecContext(t.Context(), "INSERT INTO `"+database+"`.herald_outbox (topic, `key`, payload) VALUES ('orders', 'o1', 'x')")
		require.NoError(t, err)
	}
	insert()
	require.Eventually(t, func() bool { return received.Load() >= 1 }, time.Minute, 20*time.Millisecond,
		"the relay did not publish:\n%s", c.stderr)

	// Kill the relay's connections until the driver has said so, in
	// whichever format: the test fails on the format, not on a timeout.
	driverLogged := func() bool {
		s := c.stderr.String()
		return strings.Contains(s, "go-sql-driver/mysql") || strings.Contains(s, "[mysql]")
	}
	require.Eventually(t, func() bool {
		rows, err := db.QueryContext(t.Context(), "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", database)
		require.NoError(t, err)
		var ids []int64
		for rows.Next() {
			var id int64
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		_ = rows.Close()
		for _, id := range ids {
			_, _ = db.ExecContext(t.Context(), fmt.Sprintf("KILL %d", id)) // it may have gone already
		}
		insert()
		return driverLogged()
	}, time.Minute, 200*time.Millisecond, "go-sql-driver/mysql logged nothing:\n%s", c.stderr)
	c.stop(t)
	lines := requireOnlyJSONOutput(t, c)
	require.Contains(t, libs(lines), "go-sql-driver/mysql")
}

// jsonLog is a JSON logger at Debug into a buffer, and a way to read its
// one line.
func jsonLog(t *testing.T) (*slog.Logger, func() map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return log, func() map[string]any {
		t.Helper()
		lines := requireJSONLines(t, "the log", buf.String())
		require.Len(t, lines, 1, buf.String())
		buf.Reset()
		return lines[0]
	}
}

// Each library's log call is one JSON line at the level it maps to,
// naming the library, with a URL's password scrubbed.
func TestLibraryLogAdaptersWriteOneScrubbedLine(t *testing.T) {
	t.Parallel()
	const url = "amqp://herald:" + libLogSecret + "@127.0.0.1:1/"
	log, line := jsonLog(t)
	for _, tc := range []struct {
		name  string
		log   func()
		level string
		lib   string
	}{
		{"GoRedisFailure", func() {
			redisLogger{log.With("lib", "go-redis")}.Printf(context.Background(),
				"redis: connection pool: failed to dial after %d attempts: %v", 5, errors.New("dial "+url))
		}, "WARN", "go-redis"},
		{"GoRedisPanic", func() {
			redisLogger{log.With("lib", "go-redis")}.Printf(context.Background(), "addIdleConn panic: %+v", url)
		}, "ERROR", "go-redis"},
		{"AMQPFailure", func() {
			amqpLogger{log.With("lib", "amqp091-go")}.Printf("Connection %s recovery failed: %v.", url, errors.New("refused"))
		}, "WARN", "amqp091-go"},
		{"AMQPNews", func() {
			amqpLogger{log.With("lib", "amqp091-go")}.Printf("Initiating connection recovery for %s.", url)
		}, "DEBUG", "amqp091-go"},
		{"MySQLDriver", func() {
			mysqlLogger{log.With("lib", "go-sql-driver/mysql")}.Print("packets.go:58 ", errors.New("unexpected EOF from "+url))
		}, "WARN", "go-sql-driver/mysql"},
		{"GRPCInfo", func() { grpcLogger{log.With("lib", "grpc")}.Infof("[core] dialing %s", url) }, "DEBUG", "grpc"},
		{"GRPCWarning", func() { grpcLogger{log.With("lib", "grpc")}.Warningln("[core] lost", url) }, "WARN", "grpc"},
		{"GRPCError", func() { grpcLogger{log.With("lib", "grpc")}.Error("[core] failed ", url) }, "ERROR", "grpc"},
		{"StandardLog", func() {
			stdlog.New(stdlogWriter{log.With("lib", "log")}, "", 0).Printf("http: TLS handshake error from %s", url)
		}, "WARN", "log"},
		{"FranzGoWarning", func() {
			heraldkafka.Logger(log).Log(kgo.LogLevelWarn, "unable to open connection to broker", "addr", "127.0.0.1:1",
				"err", errors.New("dial "+url))
		}, "WARN", "franz-go"},
		{"FranzGoInfo", func() {
			heraldkafka.Logger(log).Log(kgo.LogLevelInfo, "opening connection to broker", "addr", url, "broker", 1)
		}, "DEBUG", "franz-go"},
		{"AWSWarning", func() {
			heraldaws.Logger(log).Logf(logging.Warn, "Response has no supported checksum, from %s", url)
		}, "WARN", "aws-sdk-go-v2"},
		{"AWSRetry", func() {
			heraldaws.Logger(log).Logf(logging.Debug, "retrying request SQS/GetQueueUrl, attempt %d of %s", 2, url)
		}, "DEBUG", "aws-sdk-go-v2"},
	} {
		tc.log()
		m := line()
		require.Equal(t, tc.level, m["level"], tc.name)
		require.Equal(t, tc.lib, m["lib"], tc.name)
		text, err := json.Marshal(m)
		require.NoError(t, err)
		require.NotContains(t, string(text), libLogSecret, tc.name)
		require.Contains(t, string(text), "herald:xxxxx@127.0.0.1:1", "%s: the URL stays, without its password", tc.name)
	}

	// franz-go's keys are snake_case, err is error.
	heraldkafka.Logger(log).Log(kgo.LogLevelError, "fatal", "err", errors.New("x"), "timeSinceLastTry", 1)
	m := line()
	require.Equal(t, "ERROR", m["level"])
	require.Equal(t, "x", m["error"])
	require.Contains(t, m, "time_since_last_try")

	// gRPC's verbose lines are not wanted.
	require.True(t, grpcLogger{log}.V(0))
	require.False(t, grpcLogger{log}.V(2))
}

// franz-go asks its logger for the most verbose level it wants: its
// debug lines, a trace of every request, are below slog's Debug.
func TestFranzGoLevelFollowsTheHandler(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level slog.Level
		want  kgo.LogLevel
	}{
		{slog.LevelDebug - 4, kgo.LogLevelDebug},
		{slog.LevelDebug, kgo.LogLevelInfo},
		{slog.LevelInfo, kgo.LogLevelWarn},
		{slog.LevelWarn, kgo.LogLevelWarn},
		{slog.LevelError, kgo.LogLevelError},
		{slog.LevelError + 1, kgo.LogLevelNone},
	} {
		var buf bytes.Buffer
		l := heraldkafka.Logger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: tc.level})))
		require.Equal(t, tc.want, l.Level(), "slog level %s", tc.level)
		l.Log(kgo.LogLevelDebug, "wrote Produce v11", "broker", 1)
		if tc.want != kgo.LogLevelDebug {
			require.Empty(t, buf.String())
		}
	}
}

// The libraries' process-wide loggers write to the logger the command
// built, in its format; before there is one, to the fallback.
func TestCommandHandlerFollowsTheCommandsLogger(t *testing.T) {
	t.Parallel()
	var current atomic.Pointer[slog.Logger]
	var fallback, text, jsonBuf bytes.Buffer
	h := commandHandler{current: &current, fallback: slog.NewTextHandler(&fallback, nil)}
	log := slog.New(h).With("lib", "go-redis").WithGroup("g")
	log.Info("before", "k", 1)
	require.Contains(t, fallback.String(), "msg=before lib=go-redis g.k=1")

	current.Store(slog.New(slog.NewTextHandler(&text, &slog.HandlerOptions{Level: slog.LevelWarn})))
	log.Info("hidden")
	log.Warn("text", "k", 2)
	require.NotContains(t, text.String(), "hidden")
	require.Contains(t, text.String(), "msg=text lib=go-redis g.k=2")

	current.Store(slog.New(slog.NewJSONHandler(&jsonBuf, nil)))
	log.Warn("json", "k", 3)
	m := requireJSONLines(t, "the log", jsonBuf.String())
	require.Len(t, m, 1)
	require.Equal(t, "go-redis", m[0]["lib"])
	require.Equal(t, map[string]any{"k": float64(3)}, m[0]["g"])
	require.NotContains(t, fallback.String(), "text")
}
