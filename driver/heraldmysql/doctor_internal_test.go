package heraldmysql

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
)

func TestFindingsJudgePurgeLag(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		history  int64
		severity heraldspec.Severity
		message  string
	}{
		{0, heraldspec.SeverityOK, "InnoDB's history list length is 0"},
		{100_000, heraldspec.SeverityOK, "InnoDB's history list length is 100000"},
		{100_001, heraldspec.SeverityWarning, "InnoDB's history list length is 100001 (more than 100000): purge is behind"},
		{1_000_001, heraldspec.SeverityError, "InnoDB's history list length is 1000001 (more than 1000000): purge is far behind"},
	} {
		f := mysqlFacts{table: "test.herald_outbox", name: "herald_outbox", version: 1, latest: 1, history: tc.history,
			dbNow: now, before: now, after: now}
		var got []heraldspec.Finding
		for _, g := range f.findings(time.Minute) {
			if g.Check == CheckPurge {
				got = append(got, g)
			}
		}
		require.Len(t, got, 1)
		require.Equal(t, tc.severity, got[0].Severity, tc.history)
		require.Contains(t, got[0].Message, tc.message)
		if tc.severity != heraldspec.SeverityOK {
			require.Contains(t, got[0].Fix, "end the long transactions")
		}
	}
}
