package heraldmysql_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	heraldpkg "github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldmysql"
)

// MySQL groups and sorts TEXT by its first max_sort_length bytes (1024 by
// default): two errors that differ only past them are still two groups.
func TestRetryGroupsTellLongErrorsApart(t *testing.T) {
	t.Parallel()
	o := setup(t, heraldmysql.Config{})
	ids := o.kit.Write(herald("a"), herald("b"), herald("c"))
	token, envs := o.kit.Claim(10, time.Minute)
	require.Len(t, envs, 3)
	prefix := strings.Repeat("x", 4000)
	o.kit.Complete(heraldpkg.CompleteParams{Token: token, Failed: []heraldpkg.Failure{
		{ID: ids[0], Outcome: heraldpkg.OutcomeRetry, Error: prefix + " one", Delay: time.Hour},
		{ID: ids[1], Outcome: heraldpkg.OutcomeRetry, Error: prefix + " two", Delay: time.Hour},
		{ID: ids[2], Outcome: heraldpkg.OutcomeRetry, Error: prefix + " two", Delay: time.Hour},
	}})
	groups, err := o.Store.RetryGroups(t.Context(), 10)
	require.NoError(t, err)
	require.Len(t, groups, 2)
	require.Equal(t, prefix+" two", groups[0].LastError, "the whole error, the larger group first")
	require.Equal(t, int64(2), groups[0].Count)
	require.Equal(t, prefix+" one", groups[1].LastError)
}
