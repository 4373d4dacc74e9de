package heraldinbox

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every dialect has the same migrations, by number and name, and every
// statement of them can run again: Migrate runs them all each time.
func TestMigrationsMatchAcrossDialectsAndCanRunAgain(t *testing.T) {
	t.Parallel()
	rerunnable := regexp.MustCompile(`^CREATE (SCHEMA|TABLE|INDEX) IF NOT EXISTS `)
	var want []string
	for _, dialect := range []string{postgres, sqlite, mysql} {
		var got []string
		for _, m := range loadMigrations(dialect) {
			got = append(got, m.name)
			for _, st := range statements(m.sql) {
				require.Regexp(t, rerunnable, st, "%s/%s", dialect, m.name)
			}
		}
		if want == nil {
			want = got
		}
		require.Equal(t, want, got, "the migrations of %s", dialect)
	}
	require.GreaterOrEqual(t, len(want), 2)
}

func TestStatementsSplitAtTheEndOfLines(t *testing.T) {
	t.Parallel()
	got := statements("-- a comment; not a statement\nCREATE TABLE a (\n  x int); \n\nCREATE INDEX b ON a (x);\nSELECT 1")
	require.Equal(t, []string{"CREATE TABLE a (\n  x int)", "CREATE INDEX b ON a (x)", "SELECT 1"}, got)
	require.False(t, strings.Contains(strings.Join(got, ""), "comment"))
}
