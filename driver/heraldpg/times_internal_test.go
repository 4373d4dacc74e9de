package heraldpg

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

func TestTimestampsAtInfinity(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		ts      pgtype.Timestamptz
		shown   time.Time
		finite  string // finite's error; empty when it returns shown
		showNil bool
	}{
		{ts: pgtype.Timestamptz{Time: at, Valid: true}, shown: at},
		{ts: pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}, shown: endOfTime, finite: "created_at is infinity"},
		{ts: pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}, finite: "created_at is -infinity"},
		{ts: pgtype.Timestamptz{}, finite: "created_at is NULL", showNil: true},
	} {
		got, err := finite("created_at", tc.ts)
		if tc.finite != "" {
			require.EqualError(t, err, tc.finite)
		} else {
			require.NoError(t, err)
			require.Equal(t, tc.shown, got)
		}
		require.Equal(t, tc.shown, shown(tc.ts))
		if tc.showNil {
			require.Nil(t, shownPtr(tc.ts))
		} else {
			require.Equal(t, tc.shown, *shownPtr(tc.ts))
		}
	}
	b, err := endOfTime.MarshalJSON()
	require.NoError(t, err, "infinity shows as a time JSON can write")
	require.Equal(t, `"9999-12-31T23:59:59.999999Z"`, string(b))
}
