package heraldpg_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/testenv"
)

// versions returns each row's version (xmin), by id: a row written again
// has a new one.
func versions(t *testing.T, o *pgtest.Outbox, ids []string) map[string]string {
	t.Helper()
	rows, err := o.Pool.Query(t.Context(), `SELECT id::text, xmin::text FROM `+o.Store.Table()+` WHERE id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var id, xmin string
		require.NoError(t, rows.Scan(&id, &xmin))
		out[id] = xmin
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, len(ids))
	return out
}

type lease struct {
	Topic, Key, Token, Owner string
	First, Last              int64
}

func leases(t *testing.T, o *pgtest.Outbox) []lease {
	t.Helper()
	rows, err := o.Pool.Query(t.Context(), `SELECT topic, key, token::text, owner, first_seq, last_seq
		FROM "`+o.Config.Schema+`".herald_outbox_leases ORDER BY topic, key`)
	require.NoError(t, err)
	var out []lease
	for rows.Next() {
		var l lease
		require.NoError(t, rows.Scan(&l.Topic, &l.Key, &l.Token, &l.Owner, &l.First, &l.Last))
		out = append(out, l)
	}
	require.NoError(t, rows.Err())
	return out
}

// By default an ordered claim writes one lease row per key and
// no event row: the events keep their row version until the
// acknowledgement writes each of them once, with the attempt the claim
// counted and the lease's owner. Operators see them claimed meanwhile.
func TestALeasedClaimWritesNoEventRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := pgtest.New(t, testenv.PostgresPool(t), heraldpg.Config{})
	ids := writeKeys(t, o, 3, 2) // k0 k1 k2, twice
	before := versions(t, o, ids)

	batch, token, err := claimOrdered(ctx, o.Store, 100)
	require.NoError(t, err)
	require.Len(t, batch, 6)
	for _, e := range batch {
		require.Equal(t, 1, e.Attempt)
	}
	require.Equal(t, before, versions(t, o, ids), "the claim wrote an event row")
	got := leases(t, o)
	require.Len(t, got, 3)
	for i, l := range got {
		require.Equal(t, lease{Topic: "orders", Key: "k" + string(rune('0'+i)), Token: token, Owner: "pipeline-test",
			First: batch[i].Seq, Last: batch[i+3].Seq}, l)
	}
	ev, err := o.Store.GetEvent(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, heraldadmin.StateClaimed, ev.State)
	require.Equal(t, "pipeline-test", ev.ClaimedBy)
	require.NotNil(t, ev.LeaseUntil)
	again, _, err := claimOrdered(ctx, o.Store, 100)
	require.NoError(t, err)
	require.Empty(t, again, "a leased key was claimed twice")

	res, err := o.Store.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
	require.NoError(t, err)
	require.Equal(t, 6, res.Published)
	require.Empty(t, leases(t, o), "the acknowledgement ends the leases")
	for _, id := range ids {
		ev, err := o.Store.GetEvent(ctx, id)
		require.NoError(t, err)
		require.Equal(t, heraldadmin.StatePublished, ev.State)
		require.Equal(t, 1, ev.Attempt)
		require.Equal(t, "pipeline-test", ev.ClaimedBy)
	}
}

// A rescuer that ends a lease while its relay acknowledges wins or loses
// as a whole: the acknowledgement locks the batch's leases before it
// writes an event, so once the rescuer took the lease the acknowledgement
// writes nothing, even though its snapshot still showed the lease. Here
// the rescuer's transaction (as rescueLeasesSQL does it: the lease
// deleted, its events' attempt counted) is held open while the
// acknowledgement runs, and committed once the acknowledgement waits.
func TestAnAcknowledgementRacingTheRescuerWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	o := pgtest.New(t, pool, heraldpg.Config{})
	ids := writeKeys(t, o, 1, 2)
	batch, token, err := claimOrdered(ctx, o.Store, 100)
	require.NoError(t, err)
	require.Len(t, batch, 2)

	rescuer, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = rescuer.Rollback(context.WithoutCancel(ctx)) }()
	_, err = rescuer.Exec(ctx, `DELETE FROM "`+o.Config.Schema+`".herald_outbox_leases WHERE token = $1`, token)
	require.NoError(t, err)
	_, err = rescuer.Exec(ctx, `UPDATE `+o.Store.Table()+` SET attempts = attempts + 1 WHERE id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)

	done := make(chan herald.CompleteResult, 1)
	go func() {
		res, err := o.Store.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
		assert.NoError(t, err)
		done <- res
	}()
	requireWaitingForALock(t, pool, o.Config.Schema)
	require.NoError(t, rescuer.Commit(ctx))
	res := <-done
	require.Zero(t, res.Published, "the acknowledgement wrote events whose lease the rescuer had ended")
	for _, id := range ids {
		ev, err := o.Store.GetEvent(ctx, id)
		require.NoError(t, err)
		require.Equal(t, heraldadmin.StateReady, ev.State)
		require.Equal(t, 1, ev.Attempt)
	}
}

// requireWaitingForALock waits until a statement on the outbox of schema
// waits for a lock another transaction holds.
func requireWaitingForALock(t *testing.T, pool *pgxpool.Pool, schema string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var n int
		require.NoError(c, pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, `"`+schema+`"`).Scan(&n))
		require.Equal(c, 1, n)
	}, 10*time.Second, 5*time.Millisecond)
}

// Relays with and without key leases (Config.ClaimRows) may share a table: one that writes
// rows passes a key another leased, and rescues a lease that expired,
// counting the attempt, so that the key goes on.
func TestRelaysWithAndWithoutLeasesShareATable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	leasing := pgtest.New(t, pool, heraldpg.Config{LeaseMinEvents: 1})
	rows, err := heraldpg.New(pool, &heraldpg.Config{Schema: leasing.Config.Schema, ClaimRows: true})
	require.NoError(t, err)
	ids := writeKeys(t, leasing, 2, 1)

	first, err := leasing.Store.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Owner: "leasing", Limit: 1,
		Lease: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, first, 1)
	second, _, err := claimOrdered(ctx, rows, 100)
	require.NoError(t, err)
	require.Len(t, second, 1, "the key not leased, and only it")
	require.NotEqual(t, first[0].Key, second[0].Key)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := rows.RescueExpired(ctx, 10)
		require.NoError(c, err)
		require.Equal(c, 1, n)
	}, 10*time.Second, 20*time.Millisecond)
	ev, err := rows.GetEvent(ctx, first[0].ID)
	require.NoError(t, err)
	require.Equal(t, heraldadmin.StateReady, ev.State)
	require.Equal(t, 1, ev.Attempt, "the rescued lease's attempt counts")
	require.Contains(t, ev.LastError, "lease expired: relay leasing")
	third, _, err := claimOrdered(ctx, rows, 100)
	require.NoError(t, err)
	require.Equal(t, []string{first[0].ID}, []string{third[0].ID})
	require.Equal(t, 2, third[0].Attempt)
	require.Contains(t, ids, third[0].ID)
}

// A key of which a claim takes fewer than LeaseMinEvents events (2 by
// default) is claimed as rows, which costs less for one event than a
// lease row inserted, locked and deleted; the others of the same batch
// are leased, and one acknowledgement ends both.
func TestAKeyOfOneEventIsClaimedAsARow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := pgtest.New(t, testenv.PostgresPool(t), heraldpg.Config{})
	pair := writeKeys(t, o, 1, 2) // k0 twice
	one := herald.Message{ID: uuid.NewString(), Topic: "orders", Key: "single", Payload: []byte("x")}
	require.NoError(t, pgx.BeginFunc(ctx, o.Pool, func(tx pgx.Tx) error { return o.Writer.WriteTx(ctx, tx, one) }))
	single := []string{one.ID}
	before := versions(t, o, append(slices.Clone(pair), single...))

	batch, token, err := claimOrdered(ctx, o.Store, 100)
	require.NoError(t, err)
	require.Len(t, batch, 3)
	after := versions(t, o, append(slices.Clone(pair), single...))
	for _, id := range pair {
		require.Equal(t, before[id], after[id], "the pair's key is leased, its rows not written")
	}
	require.NotEqual(t, before[single[0]], after[single[0]], "the single event is claimed as a row")
	got := leases(t, o)
	require.Len(t, got, 1)
	require.Equal(t, "k0", got[0].Key)
	for _, id := range append(slices.Clone(pair), single...) {
		ev, err := o.Store.GetEvent(ctx, id)
		require.NoError(t, err)
		require.Equal(t, heraldadmin.StateClaimed, ev.State)
	}

	require.True(t, o.Store.ClaimHoldsRows(token), "the claim holds a row: its acknowledgement must look for rows")

	// Acknowledged by a driver that did not make the claim (which knows
	// nothing of it, so looks for rows too): both parts end.
	other, err := heraldpg.New(o.Pool, o.Config)
	require.NoError(t, err)
	require.True(t, other.ClaimHoldsRows(token))
	res, err := other.Complete(ctx, herald.CompleteParams{Token: token, Published: append(slices.Clone(pair), single...)})
	require.NoError(t, err)
	require.Equal(t, 3, res.Published)
	require.Empty(t, leases(t, o))
}

// A claim that leased every key it took is remembered by its driver until
// it ends, so that its acknowledgement skips the part that looks for
// rows; a released claim is forgotten.
func TestAClaimOfLeasesAloneIsAcknowledgedWithoutLookingForRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	o := pgtest.New(t, testenv.PostgresPool(t), heraldpg.Config{})
	ids := writeKeys(t, o, 3, 2)

	batch, token, err := claimOrdered(ctx, o.Store, 100)
	require.NoError(t, err)
	require.Len(t, batch, 6)
	require.Len(t, leases(t, o), 3)
	require.False(t, o.Store.ClaimHoldsRows(token), "every key of the claim is leased")
	res, err := o.Store.Complete(ctx, herald.CompleteParams{Token: token, Published: ids})
	require.NoError(t, err)
	require.Equal(t, 6, res.Published)
	require.Empty(t, leases(t, o))

	more := writeKeys(t, o, 2, 2)
	_, token, err = claimOrdered(ctx, o.Store, 100)
	require.NoError(t, err)
	require.False(t, o.Store.ClaimHoldsRows(token))
	n, err := o.Store.ReleaseClaim(ctx, token)
	require.NoError(t, err)
	require.Equal(t, len(more), n)
	require.True(t, o.Store.ClaimHoldsRows(token), "a released claim is forgotten")
}

func TestANegativeLeaseMinEventsIsRefused(t *testing.T) {
	t.Parallel()
	_, err := heraldpg.New(testenv.PostgresPool(t), &heraldpg.Config{LeaseMinEvents: -1})
	require.ErrorContains(t, err, "Config.LeaseMinEvents must not be negative")
	require.ErrorContains(t, (&heraldpg.Config{LeaseMinEvents: -2}).Validate(), "LeaseMinEvents")
}
