package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one herald command: setup registers its flags and returns
// what runs it.
type command struct {
	name    string // "relay", "dead list"
	args    string // synopsis after the name
	summary string
	setup   func(f *flagSet) func(ctx context.Context, inv *invocation) error
	// handlesAbort says the command reacts to a second signal itself; run
	// waits a moment for it instead of returning at once.
	handlesAbort bool
}

var commands = []*command{
	{name: "migrate", summary: "create or upgrade the outbox table", setup: setupMigrate},
	{name: "relay", summary: "publish committed events until SIGINT/SIGTERM", setup: setupRelay, handlesAbort: true},
	{name: "doctor", args: "[--json] [--lease D] [--source cdc] [--publisher URL | --destination NAME=URL]", summary: "check the database and the outbox against the relay: each finding with its fix; exit 1 on an error", setup: setupDoctor},
	{name: "status", args: "[--json]", summary: "row counts by topic and state, oldest pending age", setup: setupStatus},
	{name: "dead list", args: "[--topic T | --all] [--limit N] [--json]", summary: "list dead events (default --all)", setup: setupDeadList},
	{name: "dead show", args: "ID [--json]", summary: "show one event: headers, payload, attempts, last error", setup: setupDeadShow},
	{name: "dead requeue", args: "(ID... | --topic T | --all)", summary: "make dead events ready again, attempts reset", setup: setupDeadRequeue},
	{name: "dead discard", args: "(ID... | --topic T | --all) [--resume]", summary: "delete dead events; --resume lets the keys they hold back go on", setup: setupDeadDiscard},
	{name: "replay", args: "(ID... | --topic T | --key K | --type T | --since T | --until T | --all) [--dry-run] [--to NAME]",
		summary: "republish published events, in their order, to their destination or another", setup: setupReplay},
	{name: "backfill", args: "--name N --topic T (--from TABLE | --query SQL) --key-columns C [--rate N] [--max-backlog N] [--dry-run]",
		summary: "write an event for each existing row of a table or a query, in batches, resumable; Ctrl-C stops after a batch", setup: setupBackfill},
	{name: "keys blocked", args: "[--limit N] [--json]", summary: "keys parked behind a dead event: topic, key, dead event, waiting count, since", setup: setupKeysBlocked},
	{name: "pause", args: "(--topic T | --destination D) [--reason TEXT] [--relay-admin URL] [--force]", summary: "stop every relay claiming a topic's events, or those of every topic routed to a destination", setup: setupPause},
	{name: "resume", args: "(--topic T | --destination D)", summary: "end a pause: the events are claimed again, in order", setup: setupResume},
	{name: "config check", args: "--config FILE [flags]", summary: "check a configuration file (with the variables and flags given) as herald relay would, without connecting", setup: setupConfigCheck},
	{name: "config show", args: "[--config FILE] [flags]", summary: "print the configuration herald relay would run with, each value's source beside it, secrets masked", setup: setupConfigShow},
	{name: "config reference", summary: "print every key of the configuration file (Markdown)", setup: setupConfigReference},
	{name: "source poll", args: "[--cdc-slot S] [--wait D | --requeue-since T]", summary: "switch a table relayed by --source cdc back to polling: new events are polled, then wait until the change stream settled every streamed one", setup: setupSourcePoll},
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func usage() string {
	var b strings.Builder
	b.WriteString(`herald runs Herald's outbox relay and the tools to operate an outbox table.

Usage:
  herald COMMAND [arguments] [flags]

Commands:
`)
	line := func(synopsis, summary string) { fmt.Fprintf(&b, "  %-52s %s\n", synopsis, summary) }
	for _, c := range commands {
		line(strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	line("version", "Herald's version, the Go version and the platform")
	line("help [COMMAND]", "this help, or one command's")
	b.WriteString(`
The demo and the benchmarks are in herald-lab (go run ./cmd/herald-lab demo).

Flags and arguments may come in any order. A flag listed with an env
variable takes its default from that variable; the flag wins.

Flags of every database command (migrate, relay, status, dead ...):
`)
	common := newFlagSet("common")
	addDBFlags(common)
	printFlags(&b, common, nil)
	skip := map[string]bool{}
	common.fs.VisitAll(func(fl *flag.Flag) { skip[fl.Name] = true })
	for _, c := range commands {
		f := newFlagSet(c.name)
		c.setup(f)
		var own strings.Builder
		printFlags(&own, f, skip)
		if own.Len() > 0 {
			fmt.Fprintf(&b, "\nFlags of %s:\n%s", c.name, own.String())
		}
	}
	b.WriteString(`
Exit codes: 0 done; 1 failed (database or broker unreachable, which the
relay waits for instead; refused credentials, ...); 2 bad input (command,
flag, environment variable, DSN or URL); 130 a second signal aborted the
relay's graceful shutdown.
`)
	return b.String()
}

// printCommand prints one command's synopsis and every flag it takes.
func printCommand(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: herald %s\n\n%s.\n\nFlags:\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	f := newFlagSet(c.name)
	c.setup(f)
	printFlags(w, f, nil)
}

// printFlags prints the flags of f not in skip, two lines each.
func printFlags(w io.Writer, f *flagSet, skip map[string]bool) {
	f.fs.VisitAll(func(fl *flag.Flag) {
		if skip[fl.Name] {
			return
		}
		metavar, text := flag.UnquoteUsage(fl)
		fmt.Fprintf(w, "  --%s", fl.Name)
		if metavar != "" {
			fmt.Fprintf(w, " %s", metavar)
		}
		var notes []string
		if t, ok := strings.CutSuffix(text, " (required)"); ok {
			text, notes = t, append(notes, "required")
		}
		if fl.DefValue != "" && fl.DefValue != "false" {
			notes = append(notes, "default "+fl.DefValue)
		}
		if env, ok := f.envOf[fl.Name]; ok {
			notes = append(notes, "env "+env)
		}
		if len(notes) > 0 {
			text += " (" + strings.Join(notes, "; ") + ")"
		}
		fmt.Fprintf(w, "\n        %s\n", text)
	})
}

// help prints the usage, or one command's, on stdout.
func help(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage())
		return exitOK
	}
	name := strings.Join(args, " ")
	switch name {
	case "demo", "bench":
		fmt.Fprintln(stderr, movedToLab(name))
		return exitUsage
	case "keys":
		return help([]string{"keys", "blocked"}, stdout, stderr)
	case "source":
		return help([]string{"source", "poll"}, stdout, stderr)
	case "config":
		for _, c := range commands {
			if strings.HasPrefix(c.name, "config ") {
				fmt.Fprintf(stdout, "  herald %-40s %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
			}
		}
		return exitOK
	case "dead":
		for i, c := range commands {
			if strings.HasPrefix(c.name, "dead ") {
				if i > 0 && strings.HasPrefix(commands[i-1].name, "dead ") {
					fmt.Fprintln(stdout)
				}
				printCommand(stdout, c)
			}
		}
		return exitOK
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(stderr, "herald: help: unknown command %q\n", name)
		return exitUsage
	}
	printCommand(stdout, c)
	return exitOK
}
