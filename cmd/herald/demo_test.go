package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDemoCommand(t *testing.T) {
	t.Parallel()

	t.Run("RunsAndReportsEveryInvariant", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "demo", "--duration", "2s", "--rate", "150", "--outage", "300ms", "--quiet")
		require.Equal(t, 0, r.code, r.String())
		require.Contains(t, r.stdout, "300 orders at 150/s")
		require.Regexp(t, `lost\s+0\s+ok`, r.stdout)
		require.Regexp(t, `ghosts\s+0\s+ok`, r.stdout)
		require.Contains(t, r.stdout, "Every committed order's event arrived")
		require.Contains(t, r.stdout, "(includes the 300ms broker outage", "the p99 says what it includes")
	})

	t.Run("PrintsPlainLinesWhenNotATerminal", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "demo", "--duration", "1s", "--rate", "100", "--outage", "100ms")
		require.Equal(t, 0, r.code, r.String())
		require.NotContains(t, r.stdout, "\r", "no line rewritten in place in a log")
		require.Regexp(t, `(?m)^committed +\d+ +published +\d+ +received +\d+ +backlog +\d+$`, r.stdout)
	})

	for name, args := range map[string][]string{
		"TooFewOrders":       {"demo", "--orders", "3"},
		"TooShortDuration":   {"demo", "--duration", "10ms"},
		"NegativeDuration":   {"demo", "--duration", "-1s"},
		"RollbackOver90":     {"demo", "--rollback-percent", "95"},
		"NegativeOutage":     {"demo", "--outage", "-1s"},
		"UnparseableRate":    {"demo", "--rate", "fast"},
		"UnexpectedArgument": {"demo", "now"},
	} {
		t.Run("Refuses"+name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, args...)
			require.Equal(t, 2, r.code, r.String())
			require.Equal(t, 1, countLines(r.stderr), r.stderr)
		})
	}
}
