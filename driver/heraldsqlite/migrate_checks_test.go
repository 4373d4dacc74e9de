package heraldsqlite_test

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
)

// Migration 004 on a table that already holds rows breaking its rules:
// the rows are brought within them, the migration succeeds, and the rows
// are then claimed and acknowledged like any other.
func TestMigrationChecksRelayColumns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := open(t, filepath.Join(t.TempDir(), "outbox.db"))
	d, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, d.MigrateTo(ctx, 3))

	insert := func(cols, values string) string {
		t.Helper()
		var id string
		require.NoError(t, db.QueryRow(`INSERT INTO herald_outbox (topic, payload, `+cols+`)
			VALUES ('t', x'78', `+values+`) RETURNING id`).Scan(&id))
		return id
	}
	var (
		most        = insert("attempts", "9223372036854775807")
		negative    = insert("attempts", "-1")
		blobTopic   = insert("key, type", "x'6b31', x'74797065'")
		noLease     = insert("state", "'claimed'")
		textLease   = insert("state, claim_token, lease_until", "'claimed', 'token', 'never'")
		publishedAt = insert("state, published_at", "'published', 'yesterday'")
		deadAt      = insert("state, dead_at, claimed_by", "'dead', 1.5, 7")
		parkedReady = insert("key, parked", "'k2', 1")
	)
	_, err = db.Exec(`UPDATE herald_outbox SET topic = x'74' WHERE id = ?`, blobTopic)
	require.NoError(t, err)
	var blobs int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE typeof(topic) = 'blob'`).Scan(&blobs))
	require.Equal(t, 1, blobs, "the old table keeps a BLOB topic")

	require.NoError(t, d.Migrate(ctx), "the migration never fails on rows already in the table")

	var odd int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM herald_outbox WHERE
		attempts NOT BETWEEN 0 AND 1000000
		OR typeof(id) <> 'text' OR typeof(topic) <> 'text' OR typeof(key) <> 'text' OR typeof(type) <> 'text'
		OR typeof(claimed_by) NOT IN ('text', 'null')
		OR typeof(lease_until) NOT IN ('integer', 'null') OR typeof(published_at) NOT IN ('integer', 'null')
		OR typeof(dead_at) NOT IN ('integer', 'null')
		OR (state = 'claimed' AND (claim_token IS NULL OR lease_until IS NULL))
		OR (parked = 1 AND state <> 'dead')`).Scan(&odd))
	require.Zero(t, odd, "every row obeys the rules")

	get := func(id string) heraldadmin.EventRow {
		t.Helper()
		ev, err := d.GetEvent(ctx, id)
		require.NoError(t, err)
		return ev
	}
	require.Equal(t, sqlstore.MaxAttempts, get(most).Attempt)
	require.Zero(t, get(negative).Attempt)
	require.Equal(t, "k1", get(blobTopic).Key)
	require.Equal(t, heraldadmin.StateReady, get(noLease).State)
	require.Less(t, time.Until(*get(textLease).LeaseUntil), time.Minute, "a lease written as text ends, and is rescued")
	require.Less(t, time.Until(*get(publishedAt).PublishedAt), time.Minute)
	require.Equal(t, "7", get(deadAt).ClaimedBy)
	require.Less(t, time.Until(*get(deadAt).DeadAt), time.Minute)
	require.False(t, get(parkedReady).Parked)

	token := uuid.NewString()
	claimed, err := d.Claim(ctx, herald.ClaimParams{Token: token, Limit: 100, Lease: time.Minute, Unordered: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{most, negative, blobTopic, noLease, parkedReady}, ids(claimed))
	for _, env := range claimed {
		if env.ID == most {
			require.Equal(t, sqlstore.MaxAttempts, env.Attempt, "the count stops at the most the column admits")
		}
	}
	res, err := d.Complete(ctx, herald.CompleteParams{Token: token, Published: ids(claimed)})
	require.NoError(t, err)
	require.Equal(t, len(claimed), res.Published)
}

// After migration 004, a row the relay could not handle is refused when
// written or changed, saying which rule it breaks.
func TestChecksRefuseOddRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct{ cols, values, want string }{
		{"attempts", "9223372036854775807", "herald: attempts must be between 0 and 1000000"},
		{"attempts", "-1", "herald: attempts must be between 0 and 1000000"},
		{"key", "x'6b'", "id, topic, key, type, aggregate_type and aggregate_id must be text"},
		{"type", "x'74'", "id, topic, key, type, aggregate_type and aggregate_id must be text"},
		{"claimed_by", "x'00'", "claim_token, claimed_by and last_error must be text or NULL"},
		{"state, published_at", "'published', 'yesterday'", "lease_until, published_at and dead_at must be integer microseconds or NULL"},
		{"state, dead_at", "'dead', 1.5", "must be integer microseconds or NULL"},
		{"state", "'claimed'", "a claimed row needs a claim_token and a lease_until"},
		{"parked", "1", "only a dead row parks its key"},
	} {
		_, err := b.DB.Exec(`INSERT INTO herald_outbox (topic, payload, ` + tc.cols + `) VALUES ('t', x'78', ` + tc.values + `)`)
		require.ErrorContains(t, err, tc.want, tc.cols+" = "+tc.values)
	}
	// A number written into a text column is kept as text, as before.
	b.exec(t, `INSERT INTO herald_outbox (topic, key, payload) VALUES (42, 7, x'78')`)
	id := b.Write(herald.Message{Topic: "t", Payload: []byte("x")})[0]
	_, err := b.DB.Exec(`UPDATE herald_outbox SET attempts = ? WHERE id = ?`, int64(math.MaxInt64), id)
	require.ErrorContains(t, err, "herald: attempts must be between 0 and 1000000", "a program's UPDATE is checked too")
}

func ids(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}
