package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/herald-outbox/herald/internal/buildinfo"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1   // the command ran and failed: unreachable database or broker, ...
	exitUsage   = 2   // bad command, flag, environment variable, DSN or URL
	exitAborted = 130 // a second signal cut a graceful shutdown short
)

// usageError is bad input from the command line or the environment.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// errAborted is returned by a command cut short by a second signal.
var errAborted = errors.New("second signal: aborted without finishing the graceful shutdown")

// abortGrace is how long run waits, after a second signal, for a command
// that handles the abort itself (the relay releases its in-flight rows).
const abortGrace = 3 * time.Second

// system is what run takes from the process, so that tests can replace it.
type system struct {
	getenv  func(string) (string, bool)
	signals <-chan os.Signal
}

// run is the whole program. The first SIGINT or SIGTERM cancels the
// command's context (the relay then drains); a second one aborts. The
// libraries' own logs go to the command's logger (liblogs.go).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	routeLibraryLogs(stderr)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	return runWith(ctx, system{getenv: os.LookupEnv, signals: sigs}, args, stdout, stderr)
}

// invocation is what a command runs with.
type invocation struct {
	stdout io.Writer
	stderr *redactor // logs; also knows the run's secrets
	getenv func(string) (string, bool)
	args   []string // positional arguments
	flags  *flagSet
	abort  <-chan struct{} // closed by a second signal
	// checkOnly makes the relay's command stop once every input is
	// checked, before anything connects (herald config check).
	checkOnly bool
}

func runWith(ctx context.Context, sys system, args []string, stdout, stderr io.Writer) int {
	red := &redactor{w: stderr}
	ctx, abort, stop := watchSignals(ctx, sys.signals)
	defer stop()

	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return help(rest, stdout, stderr)
	case "demo", "bench":
		fmt.Fprintln(stderr, movedToLab(name))
		return exitUsage
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.Read())
		return exitOK
	case "dead":
		if len(rest) == 0 || rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" {
			if len(rest) == 0 {
				fmt.Fprintln(stderr, "herald: dead needs a subcommand: list, show, requeue or discard (see herald help dead)")
				return exitUsage
			}
			return help([]string{"dead"}, stdout, stderr)
		}
		name, rest = "dead "+rest[0], rest[1:]
	case "keys":
		if len(rest) == 0 {
			fmt.Fprintln(stderr, "herald: keys needs a subcommand: blocked (see herald help keys)")
			return exitUsage
		}
		if rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" {
			return help([]string{"keys"}, stdout, stderr)
		}
		name, rest = "keys "+rest[0], rest[1:]
	case "config":
		if len(rest) == 0 {
			fmt.Fprintln(stderr, "herald: config needs a subcommand: check, show or reference (see herald help config)")
			return exitUsage
		}
		if rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" {
			return help([]string{"config"}, stdout, stderr)
		}
		name, rest = "config "+rest[0], rest[1:]
	case "source":
		if len(rest) == 0 {
			fmt.Fprintln(stderr, "herald: source needs a subcommand: poll (see herald help source)")
			return exitUsage
		}
		if rest[0] == "-h" || rest[0] == "--help" || rest[0] == "-help" {
			return help([]string{"source"}, stdout, stderr)
		}
		name, rest = "source "+rest[0], rest[1:]
	}
	cmd := lookup(name)
	if cmd == nil {
		if len(name) > 5 && name[:5] == "dead " {
			fmt.Fprintf(stderr, "herald: unknown dead subcommand %q (%suse list, show, requeue or discard)\n",
				red.scrub(name[5:]), didYouMean(name[5:], "list", "show", "requeue", "discard"))
		} else if len(name) > 5 && name[:5] == "keys " {
			fmt.Fprintf(stderr, "herald: unknown keys subcommand %q: use blocked\n", red.scrub(name[5:]))
		} else if rest, ok := strings.CutPrefix(name, "config "); ok {
			fmt.Fprintf(stderr, "herald: unknown config subcommand %q (%suse check, show or reference)\n",
				red.scrub(rest), didYouMean(rest, "check", "show", "reference"))
		} else if rest, ok := strings.CutPrefix(name, "source "); ok {
			fmt.Fprintf(stderr, "herald: unknown source subcommand %q: use poll\n", red.scrub(rest))
		} else {
			fmt.Fprintf(stderr, "herald: unknown command %q (%ssee herald help)\n", red.scrub(name), didYouMean(name, topCommands()...))
		}
		return exitUsage
	}

	f := newFlagSet(cmd.name)
	runner := cmd.setup(f)
	positional, err := f.parse(rest, sys.getenv)
	if errors.Is(err, flag.ErrHelp) {
		printCommand(stdout, cmd)
		return exitOK
	}
	if err != nil {
		return report(red, err)
	}
	inv := &invocation{stdout: stdout, stderr: red, getenv: f.getenv, args: positional, flags: f, abort: abort}

	done := make(chan error, 1)
	go func() { done <- runner(ctx, inv) }()
	select {
	case err = <-done:
	case <-abort:
		if !cmd.handlesAbort {
			fmt.Fprintln(red, "herald: second signal: aborting")
			return exitAborted
		}
		select {
		case err = <-done:
		case <-time.After(abortGrace):
			err = errAborted
		}
	}
	return report(red, err)
}

// report prints err, if any, as one line on stderr and returns the exit code.
func report(red *redactor, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(red, "herald: "+red.scrub(err.Error()))
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.Is(err, errAborted):
		return exitAborted
	}
	return exitFailed
}

// watchSignals returns a context cancelled by the first signal (or by
// parent), a channel closed by the second signal, and a function that stops
// watching.
func watchSignals(parent context.Context, sigs <-chan os.Signal) (context.Context, <-chan struct{}, func()) {
	ctx, cancel := context.WithCancel(parent)
	abort := make(chan struct{})
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			close(abort)
		case <-done:
		}
	}()
	return ctx, abort, func() {
		close(done)
		<-finished
		cancel()
	}
}

// movedToLab is the line `herald demo` and `herald bench` print: both are
// in herald-lab, so that the herald binary links no embedded test server.
func movedToLab(name string) string {
	return fmt.Sprintf("herald: %s is in herald-lab: go run github.com/herald-outbox/herald/cmd/herald-lab@latest %s "+
		"(in a clone: go run ./cmd/herald-lab %s)", name, name, name)
}
