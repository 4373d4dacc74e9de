package main

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/grpclog"

	"github.com/herald-outbox/herald"
)

// The libraries that log through process-wide loggers (go-redis,
// amqp091-go, go-sql-driver/mysql, gRPC under the Pub/Sub client, the
// standard library's log) print to stderr in formats of their own unless
// told otherwise: with --log-format json, their lines were the ones that
// were not JSON. run points those loggers, once, at the command's logger;
// the clients that take a logger of their own are given the command's
// logger where the daemon builds them: franz-go, the AWS SDK and the NATS
// callbacks through the destination's Logger (openSpec), which
// heraldkafka's, heraldaws's and heraldnats's Open give their clients
// (nats.go prints nothing itself once its callbacks are set), and paho
// through heraldmqtt.New.

// commandLog is the logger the command built from --log-format and
// --log-level; the libraries' process-wide loggers write to it.
var commandLog atomic.Pointer[slog.Logger]

// setLibraryLogger makes log the logger of the libraries' process-wide
// logs. Each command calls it once its flags are read; in a process that
// runs several commands (the tests), the last one's wins.
func setLibraryLogger(log *slog.Logger) { commandLog.Store(log) }

var routeOnce sync.Once

// routeLibraryLogs points the libraries' process-wide loggers at the
// command's logger, once per process. Until a command has built its
// logger, their lines go to stderr as slog text.
//
// Some of these loggers are plain variables that their libraries read
// without a lock (amqp091-go's, gRPC's, go-sql-driver's), so they are set
// before any client exists: run calls this first. go-sql-driver copies its
// logger into each Config that ParseDSN returns, which --db's parsing
// comes after.
func routeLibraryLogs(stderr io.Writer) {
	routeOnce.Do(func() {
		log := slog.New(commandHandler{current: &commandLog, fallback: slog.NewTextHandler(stderr, nil)})
		redis.SetLogger(redisLogger{log.With("lib", "go-redis")})
		amqp.SetLogger(amqpLogger{log.With("lib", "amqp091-go")})
		_ = mysql.SetLogger(mysqlLogger{log.With("lib", "go-sql-driver/mysql")}) // fails only on nil
		grpclog.SetLoggerV2(grpcLogger{log.With("lib", "grpc")})
		// slog.Default serves the libraries that log with slog; setting it
		// also sends the log package's lines to it, which stdlogWriter
		// then takes over to scrub them and name their source.
		slog.SetDefault(log)
		stdlog.SetOutput(stdlogWriter{log.With("lib", "log")})
		stdlog.SetFlags(0)
	})
}

// commandHandler hands every record to the handler of the command's
// logger (current), or to fallback before there is one: the libraries'
// loggers are set once, before the command reads its flags.
type commandHandler struct {
	current  *atomic.Pointer[slog.Logger]
	fallback slog.Handler
	// with replays the attributes and groups added by With and WithGroup
	// onto the target handler, in order.
	with []func(slog.Handler) slog.Handler
}

func (h commandHandler) base() slog.Handler {
	if l := h.current.Load(); l != nil {
		return l.Handler()
	}
	return h.fallback
}

func (h commandHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.base().Enabled(ctx, level)
}

func (h commandHandler) Handle(ctx context.Context, r slog.Record) error {
	t := h.base()
	for _, w := range h.with {
		t = w(t)
	}
	return t.Handle(ctx, r)
}

func (h commandHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return h.add(func(t slog.Handler) slog.Handler { return t.WithAttrs(attrs) })
}

func (h commandHandler) WithGroup(name string) slog.Handler {
	return h.add(func(t slog.Handler) slog.Handler { return t.WithGroup(name) })
}

func (h commandHandler) add(w func(slog.Handler) slog.Handler) commandHandler {
	h.with = append(h.with[:len(h.with):len(h.with)], w)
	return h
}

// logText writes a library's line to log at level, scrubbed, as one
// record: a library's text may quote a URL with its password.
func logText(log *slog.Logger, level slog.Level, text string) {
	log.Log(context.Background(), level, herald.Scrub(strings.TrimSpace(text)))
}

// redisLogger is go-redis's logger. Without it, go-redis prints "redis:
// 2026/01/02 15:04:05 pool.go:770: redis: connection pool: failed to dial
// after 5 attempts: ..." to stderr. What it logs are failures (a dial, a
// connection hook, a sentinel) and recovered panics: Warn, and Error for
// a panic.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	text := fmt.Sprintf(format, v...)
	level := slog.LevelWarn
	if strings.Contains(text, "panic") {
		level = slog.LevelError
	}
	logText(l.log, level, text)
}

// amqpFailure tells amqp091-go's failures from its news about recovery.
var amqpFailure = regexp.MustCompile(`(?i)error|fail|unexpected|exhausted|abort`)

// amqpLogger is amqp091-go's logger, which logs nothing by default: its
// lines are about closed channels and connections and their recovery.
// Failures are Warn, the rest ("Initiating channel 1 recovery") Debug.
type amqpLogger struct{ log *slog.Logger }

func (l amqpLogger) Printf(format string, v ...any) {
	text := fmt.Sprintf(format, v...)
	level := slog.LevelDebug
	if amqpFailure.MatchString(text) {
		level = slog.LevelWarn
	}
	logText(l.log, level, text)
}

// mysqlLogger is go-sql-driver/mysql's logger. Without it, the driver
// prints "[mysql] 2026/01/02 15:04:05 packets.go:58 unexpected EOF" to
// stderr when a connection breaks under it; database/sql then retries on
// another connection, so these are Warn.
type mysqlLogger struct{ log *slog.Logger }

func (l mysqlLogger) Print(v ...any) {
	logText(l.log, slog.LevelWarn, fmt.Sprint(v...))
}

// grpcLogger is gRPC's logger, under the Pub/Sub client. Without it, gRPC
// prints its errors to stderr in glog's format ("2026/01/02 15:04:05 ERROR:
// [core] ..."). Its info lines are Debug; Fatal logs at Error and exits,
// as gRPC expects of it.
type grpcLogger struct{ log *slog.Logger }

func (l grpcLogger) Info(args ...any)   { l.print(slog.LevelDebug, fmt.Sprint(args...)) }
func (l grpcLogger) Infoln(args ...any) { l.print(slog.LevelDebug, fmt.Sprintln(args...)) }
func (l grpcLogger) Infof(format string, args ...any) {
	l.print(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (l grpcLogger) Warning(args ...any)   { l.print(slog.LevelWarn, fmt.Sprint(args...)) }
func (l grpcLogger) Warningln(args ...any) { l.print(slog.LevelWarn, fmt.Sprintln(args...)) }
func (l grpcLogger) Warningf(format string, args ...any) {
	l.print(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (l grpcLogger) Error(args ...any)   { l.print(slog.LevelError, fmt.Sprint(args...)) }
func (l grpcLogger) Errorln(args ...any) { l.print(slog.LevelError, fmt.Sprintln(args...)) }
func (l grpcLogger) Errorf(format string, args ...any) {
	l.print(slog.LevelError, fmt.Sprintf(format, args...))
}
func (l grpcLogger) Fatal(args ...any)                 { l.Error(args...); os.Exit(1) }
func (l grpcLogger) Fatalln(args ...any)               { l.Errorln(args...); os.Exit(1) }
func (l grpcLogger) Fatalf(format string, args ...any) { l.Errorf(format, args...); os.Exit(1) }

// V reports whether gRPC's verbose info lines of verbosity v are wanted:
// none beyond 0, as gRPC's default logger.
func (l grpcLogger) V(v int) bool { return v <= 0 }

func (l grpcLogger) print(level slog.Level, text string) {
	if l.log.Enabled(context.Background(), level) {
		logText(l.log, level, text)
	}
}

// stdlogWriter takes the lines of the standard library's log package:
// net/http's server errors ("http: TLS handshake error from ...") and
// whatever else prints with it. They have no level; they are Warn.
type stdlogWriter struct{ log *slog.Logger }

func (w stdlogWriter) Write(p []byte) (int, error) {
	logText(w.log, slog.LevelWarn, string(p))
	return len(p), nil
}
