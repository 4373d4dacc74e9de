package heraldpg_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
	"github.com/herald-outbox/herald/internal/testenv"
)

// checks are the constraints of migration 004 on the default table.
var checks = []string{
	"herald_outbox_attempts_range", "herald_outbox_pending_times_finite", "herald_outbox_relay_times_finite",
	"herald_outbox_claim_has_lease", "herald_outbox_parked_is_dead",
}

// Migration 004 on a table that already holds rows breaking its checks:
// the rows are brought within them, the migration succeeds, the checks are
// validated, and the rows are then claimed like any other.
func TestMigrationChecksRelayColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	d, err := heraldpg.New(pool, &heraldpg.Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, d.MigrateTo(ctx, 3))
	table := d.Table()

	insert := func(key, cols, values string) string {
		t.Helper()
		var id string
		require.NoError(t, pool.QueryRow(ctx, `INSERT INTO `+table+` (topic, key, payload, `+cols+`)
			VALUES ('t', $1, 'x', `+values+`) RETURNING id::text`, key).Scan(&id))
		return id
	}
	var (
		most        = insert("", "attempts", "2147483647")
		negative    = insert("", "attempts", "-5")
		createdInf  = insert("k1", "created_at", "'infinity'")
		claimedNeg  = insert("", "state, claim_token, lease_until, created_at", "'claimed', gen_random_uuid(), now(), '-infinity'")
		neverDue    = insert("k2", "available_at", "'infinity'")
		alwaysDue   = insert("", "available_at", "'-infinity'")
		noLease     = insert("", "state", "'claimed'")
		endless     = insert("", "state, claim_token, lease_until", "'claimed', gen_random_uuid(), 'infinity'")
		publishedAt = insert("", "state, published_at, created_at", "'published', 'infinity', 'infinity'")
		deadAt      = insert("", "state, dead_at", "'dead', '-infinity'")
		parkedReady = insert("k3", "parked", "true")
	)

	require.NoError(t, d.Migrate(ctx), "the migration never fails on rows already in the table")
	rows, _ := pool.Query(ctx, `SELECT conname, convalidated FROM pg_constraint
		WHERE conrelid = $1::regclass AND conname = ANY($2)`, table, checks)
	valid, err := pgx.CollectRows(rows, pgx.RowToMap)
	require.NoError(t, err)
	require.Len(t, valid, len(checks))
	for _, c := range valid {
		require.Equal(t, true, c["convalidated"], "%s holds for every row", c["conname"])
	}

	get := func(id string) heraldadmin.EventRow {
		t.Helper()
		ev, err := d.GetEvent(ctx, id)
		require.NoError(t, err)
		return ev
	}
	require.Equal(t, sqlstore.MaxAttempts, get(most).Attempt)
	require.Zero(t, get(negative).Attempt)
	for id, want := range map[string]struct {
		parked bool
		reason string
	}{
		createdInf: {true, "herald: unreadable row: created_at is infinity"},
		claimedNeg: {false, "herald: unreadable row: created_at is -infinity"},
		neverDue:   {true, "herald: unreadable row: available_at is infinity"},
	} {
		ev := get(id)
		require.Equal(t, heraldadmin.StateDead, ev.State, want.reason)
		require.Equal(t, want.reason, ev.LastError)
		require.Equal(t, want.parked, ev.Parked, "a dead row on a key parks it")
		require.NotNil(t, ev.DeadAt)
		require.Nil(t, ev.LeaseUntil)
	}
	require.Less(t, time.Until(get(alwaysDue).AvailableAt), time.Minute)
	require.Equal(t, heraldadmin.StateReady, get(noLease).State)
	require.Less(t, time.Until(*get(endless).LeaseUntil), time.Minute, "an endless lease ends, and is rescued")
	require.Less(t, time.Until(*get(publishedAt).PublishedAt), time.Minute)
	require.Equal(t, time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), get(publishedAt).CreatedAt,
		"a published row keeps its created_at; infinity shows as the last time JSON can write")
	require.Greater(t, get(deadAt).DeadAt.Year(), 2000)
	require.False(t, get(parkedReady).Parked)

	claimed, err := d.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Limit: 100, Lease: time.Minute, Unordered: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{most, negative, alwaysDue, noLease, parkedReady}, ids(claimed))
	for _, env := range claimed {
		if env.ID == most {
			require.Equal(t, sqlstore.MaxAttempts, env.Attempt, "the count stops at the most the column admits")
		}
	}

	// A requeued row created at infinity is renewed, or the checks would
	// refuse it as pending.
	n, err := d.RequeueDead(ctx, heraldadmin.EventFilter{IDs: []string{createdInf}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	requeued := get(createdInf)
	require.Equal(t, heraldadmin.StateReady, requeued.State)
	require.Less(t, time.Since(requeued.CreatedAt), time.Minute)
}

// After migration 004, a row the relay could not handle is refused when
// written, with the name of the rule it breaks.
func TestChecksRefuseOddRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, tc := range []struct{ cols, values, check string }{
		{"attempts", "2147483647", "attempts_range"},
		{"attempts", "-1", "attempts_range"},
		{"created_at", "'infinity'", "pending_times_finite"},
		{"available_at", "'-infinity'", "pending_times_finite"},
		{"state, claim_token, lease_until", "'claimed', gen_random_uuid(), 'infinity'", "relay_times_finite"},
		{"state, published_at", "'published', '-infinity'", "relay_times_finite"},
		{"state", "'claimed'", "claim_has_lease"},
		{"parked", "true", "parked_is_dead"},
	} {
		_, err := b.Pool.Exec(ctx, `INSERT INTO `+b.Store.Table()+` (topic, payload, `+tc.cols+`) VALUES ('t', 'x', `+tc.values+`)`)
		require.ErrorContains(t, err, `violates check constraint "herald_outbox_`+tc.check+`"`, tc.cols+" = "+tc.values)
	}
	// What the relay's statements write always passes, as the suite shows;
	// a program's UPDATE is checked too.
	id := b.Write(herald.Message{Topic: "t", Payload: []byte("x")})[0]
	_, err := b.Pool.Exec(ctx, `UPDATE `+b.Store.Table()+` SET attempts = -1 WHERE id = $1`, id)
	require.ErrorContains(t, err, "herald_outbox_attempts_range")
	// Dead and published rows keep what they were written with.
	_, err = b.Pool.Exec(ctx, `INSERT INTO `+b.Store.Table()+` (topic, payload, state, created_at, last_error)
		VALUES ('t', 'x', 'dead', 'infinity', 'imported')`)
	require.NoError(t, err)
}

func ids(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}
