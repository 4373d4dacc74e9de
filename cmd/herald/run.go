package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/bench"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed: unreachable database, ...
	exitUsage = 2 // bad command, flag, DSN or URL
)

// usageError is bad input from the command line or the environment.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// env looks up an environment variable.
type env func(name string) (string, bool)

const usage = `herald: the transactional outbox relay and its operator tools.

Usage:
  herald migrate                      create or upgrade the outbox table
  herald relay                        publish committed events until SIGINT/SIGTERM
  herald status [--json]              counts by topic and state, oldest pending age
  herald dead list [--topic T | --all] [--limit N] [--json]
  herald dead show ID [--json]
  herald dead requeue (ID... | --topic T | --all)
  herald dead discard (ID... | --topic T | --all)
  herald demo                         the whole pattern on an embedded default
  herald bench [producers|drain|latency|all]
  herald help

Every flag can also be set by an environment variable: --db is HERALD_DB,
--batch-size is HERALD_BATCH_SIZE, and so on. Flags win.
Run "herald COMMAND -h" for a command's flags.
`

// run is the whole program; main only wires signals and the process.
func run(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "migrate":
		err = cmdMigrate(ctx, rest, getenv, stdout, stderr)
	case "relay":
		err = cmdRelay(ctx, rest, getenv, stdout, stderr)
	case "status":
		err = cmdStatus(ctx, rest, getenv, stdout, stderr)
	case "dead":
		err = cmdDead(ctx, rest, getenv, stdout, stderr)
	case "demo":
		err = cmdDemo(ctx, rest, getenv, stdout, stderr)
	case "bench":
		return bench.Main(ctx, rest, stdout, stderr)
	default:
		err = usagef("unknown command %q (see herald help)", cmd)
	}
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	}
	fmt.Fprintln(stderr, "herald:", herald.Scrub(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitError
}

// flags is a command's flag set with HERALD_* environment defaults.
type flags struct {
	*flag.FlagSet
	getenv env
	stderr io.Writer
}

func newFlags(name string, getenv env, stderr io.Writer) *flags {
	fs := flag.NewFlagSet("herald "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := &flags{FlagSet: fs, getenv: getenv, stderr: stderr}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of herald %s:\n", name)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return f
}

// envName is the environment variable of a flag: --batch-size is
// HERALD_BATCH_SIZE.
func envName(flagName string) string {
	return "HERALD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parse parses args, then fills every flag not given on the command line
// from its environment variable.
func (f *flags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.Usage()
			return err
		}
		return usagef("%v", err)
	}
	set := map[string]bool{}
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var err error
	f.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] || err != nil {
			return
		}
		name := envName(fl.Name)
		if v, ok := f.getenv(name); ok && v != "" {
			if e := f.Set(fl.Name, v); e != nil {
				err = usagef("%s: invalid value: %v", name, e)
			}
		}
	})
	return err
}

// common are the flags every database command takes.
type common struct {
	db, schema, table, logFormat, logLevel string
}

func (c *common) register(f *flags) {
	f.StringVar(&c.db, "db", "", "database DSN: postgres://user:pass@host:5432/db (env HERALD_DB)")
	f.StringVar(&c.schema, "schema", "", `schema of the outbox table (default "public")`)
	f.StringVar(&c.table, "table", "", `name of the outbox table (default "herald_outbox")`)
	f.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

func (c *common) logger(stderr io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, usagef("--log-level: %q is not one of debug, info, warn, error", c.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(stderr, opts)), nil
	}
	return nil, usagef("--log-format: %q is not text or json", c.logFormat)
}

// durationFlag accepts Go durations ("90s", "5m").
func parsePositive(name string, d time.Duration) error {
	if d < 0 {
		return usagef("--%s must not be negative", name)
	}
	return nil
}

// redactURL returns raw with any password replaced, for messages.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return herald.Scrub(raw)
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// scrubSecret removes secret, and anything Scrub recognises, from msg.
func scrubSecret(msg, secret string) string {
	if secret != "" {
		msg = strings.ReplaceAll(msg, secret, "xxxxx")
		if esc := url.QueryEscape(secret); esc != secret {
			msg = strings.ReplaceAll(msg, esc, "xxxxx")
		}
	}
	return herald.Scrub(msg)
}

// passwordOf returns the password of a URL-shaped DSN, or "".
func passwordOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		// An unparseable DSN may still hold a password: take what sits
		// between the first ':' after the scheme and the last '@'.
		rest, ok := strings.CutPrefix(raw, schemeOf(raw)+"://")
		at := strings.LastIndex(rest, "@")
		if !ok || at < 0 {
			return ""
		}
		if _, pw, found := strings.Cut(rest[:at], ":"); found {
			return pw
		}
		return ""
	}
	pw, _ := u.User.Password()
	return pw
}

func schemeOf(raw string) string {
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, _, _ = strings.Cut(raw, ":")
	}
	return strings.ToLower(scheme)
}
