package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/demo"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	// `herald-lab demo` re-executes this binary to run its relay child.
	demo.RunRelayChildIfAsked()
	testenv.Main(m)
}

// result is what one run of the program printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string { return "stdout:\n" + r.stdout + "\nstderr:\n" + r.stderr }

func cli(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func TestDemoCommand(t *testing.T) {
	t.Parallel()

	t.Run("RunsAndReportsEveryInvariant", func(t *testing.T) {
		t.Parallel()
		r := cli("demo", "--duration", "2s", "--rate", "150", "--outage", "300ms", "--quiet")
		require.Equal(t, 0, r.code, r.String())
		require.Contains(t, r.stdout, "300 orders at 150/s")
		require.Regexp(t, `lost\s+0\s+ok`, r.stdout)
		require.Regexp(t, `ghosts\s+0\s+ok`, r.stdout)
		require.Contains(t, r.stdout, "Every committed order's event arrived")
		require.Contains(t, r.stdout, "(includes the 300ms broker outage", "the p99 says what it includes")
	})

	t.Run("PrintsPlainLinesWhenNotATerminal", func(t *testing.T) {
		t.Parallel()
		r := cli("demo", "--duration", "1s", "--rate", "100", "--outage", "100ms")
		require.Equal(t, 0, r.code, r.String())
		require.NotContains(t, r.stdout, "\r", "no line rewritten in place in a log")
		require.Regexp(t, `(?m)^committed +\d+ +published +\d+ +received +\d+ +backlog +\d+$`, r.stdout)
	})

	t.Run("HelpListsEveryFlagWithTwoDashes", func(t *testing.T) {
		t.Parallel()
		r := cli("demo", "-h")
		require.Equal(t, 0, r.code, r.String())
		for _, name := range []string{"--orders N", "--rate N", "--rollback-percent percent", "--outage duration", "--duration duration", "--quiet"} {
			require.Contains(t, r.stdout, "\n  "+name+"\n", r.stdout)
		}
		require.Empty(t, r.stderr)
	})

	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"TooFewOrders":       {[]string{"demo", "--orders", "3"}, "--orders at least 10"},
		"TooShortDuration":   {[]string{"demo", "--duration", "10ms"}, "--orders at least 10"},
		"NegativeDuration":   {[]string{"demo", "--duration", "-1s"}, "--duration must not be negative"},
		"RollbackOver90":     {[]string{"demo", "--rollback-percent", "95"}, "--rollback-percent 0 to 90"},
		"NegativeOutage":     {[]string{"demo", "--outage", "-1s"}, "--outage not negative"},
		"UnparseableRate":    {[]string{"demo", "--rate", "fast"}, `invalid value "fast" for flag --rate`},
		"UnknownFlag":        {[]string{"demo", "--nope"}, "not defined: --nope"},
		"UnexpectedArgument": {[]string{"demo", "now"}, `takes no arguments, got "now"`},
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			r := cli(tc.args...)
			require.Equal(t, 2, r.code, r.String())
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, "herald-lab demo: "), r.stderr)
			require.Contains(t, r.stderr, tc.want)
		})
	}
}

func TestCommands(t *testing.T) {
	t.Parallel()

	t.Run("BenchHelpIsHeraldLabs", func(t *testing.T) {
		t.Parallel()
		r := cli("bench", "-h")
		require.Equal(t, 0, r.code, r.String())
		require.Contains(t, r.stdout, "usage: herald-lab bench")
	})

	t.Run("VersionSaysWhichHeraldAndGo", func(t *testing.T) {
		t.Parallel()
		r := cli("version")
		require.Equal(t, 0, r.code, r.String())
		require.Regexp(t, `^herald \S+( \(\S+\))?, go1\.\d+\S* \w+/\w+\n$`, r.stdout)
	})

	t.Run("HelpNamesDemoAndBench", func(t *testing.T) {
		t.Parallel()
		r := cli("help")
		require.Equal(t, 0, r.code, r.String())
		require.Contains(t, r.stdout, "herald-lab demo [flags]")
		require.Contains(t, r.stdout, "herald-lab bench [producers|drain|latency|all] [flags]")
	})

	t.Run("NoCommandPrintsTheUsageAndExits2", func(t *testing.T) {
		t.Parallel()
		r := cli()
		require.Equal(t, 2, r.code, r.String())
		require.Contains(t, r.stderr, "herald-lab demo")
	})

	t.Run("RelayIsHeraldsCommand", func(t *testing.T) {
		t.Parallel()
		r := cli("relay")
		require.Equal(t, 2, r.code, r.String())
		require.Equal(t, `herald-lab: unknown command "relay" (use demo or bench; the relay and the operator commands are herald's)`+"\n", r.stderr)
	})
}
