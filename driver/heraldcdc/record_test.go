package heraldcdc_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The record of positions keeps when the confirmed transaction committed,
// not when the relay confirmed it: the recovery from a lost slot requeues
// the streamed rows from there, so a relay that lagged (a broker outage,
// a backlog) leaves no unconfirmed row before the window. Here the relay
// confirms seconds after the commit; the record, and the window the
// refusal of the dropped slot gives, start at the commit.
func TestTheRecordKeepsTheCommitTimeOfWhatTheSlotConfirms(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := context.Background()
	f := setup(t)
	// No heartbeats: one after the confirmation would raise the record to
	// its own time.
	cfg := heraldcdc.Config{ConnString: f.dsn, StatusInterval: time.Second, HeartbeatInterval: -1, Logger: heralddrivertest.Logger(t)}
	s, err := heraldcdc.Open(ctx, cfg)
	require.NoError(t, err)
	f.insert(t, [3]string{"orders", "k", "lagging"})
	tx := next(t, s)

	// The relay lags: the database's clock passes the commit by 2s first.
	require.Eventually(t, func() bool {
		var past bool
		return f.pool.QueryRow(ctx, `SELECT now() > $1::timestamptz + interval '2 seconds'`, tx.CommitTime).Scan(&past) == nil && past
	}, 10*time.Second, 20*time.Millisecond)
	s.Confirm(tx.End)
	var (
		raw string
		at  time.Time
	)
	require.Eventually(t, func() bool {
		if f.pool.QueryRow(ctx, `SELECT position::text, updated_at FROM herald_outbox_cdc WHERE slot = 'herald_outbox'`).Scan(&raw, &at) != nil {
			return false
		}
		pos, err := pglogrepl.ParseLSN(raw)
		return err == nil && pos >= tx.End
	}, 10*time.Second, 20*time.Millisecond)
	require.WithinDuration(t, tx.CommitTime, at, time.Millisecond, "the record's time is the commit's")
	require.NoError(t, s.Close())

	f.awaitSlotIdle(t)
	_, err = f.pool.Exec(ctx, `SELECT pg_drop_replication_slot('herald_outbox')`)
	require.NoError(t, err)
	_, err = heraldcdc.Open(ctx, cfg)
	require.ErrorContains(t, err, "replication slot herald_outbox does not exist, but Herald read from it up to")
	m := regexp.MustCompile(`--requeue-since (\S+)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "%v", err)
	require.Equal(t, tx.CommitTime.Add(-heraldcdc.RecoveryMargin).UTC().Format(time.RFC3339), m[1],
		"the recovery's window starts a margin before the commit, not before the confirmation")
}
