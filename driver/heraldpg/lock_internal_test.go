package heraldpg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

// A claim decides about a key only under the key's advisory lock: while
// another transaction holds it (a claim in progress whose snapshot may not
// show a late commit yet), the key is skipped.
func TestOrderedClaimSkipsAKeyAnotherClaimIsDeciding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	cfg := &Config{Schema: testenv.Schema(t)}
	d, err := New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))
	w, err := NewWriter(cfg)
	require.NoError(t, err)
	one := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "k1", Payload: []byte(`{}`)}
	two := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "k2", Payload: []byte(`{}`)}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return w.WriteTx(ctx, tx, one, two) }))

	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `SELECT pg_advisory_xact_lock($1::integer, hashtext($2))`, d.lockSpace, "orders\nk1")
	require.NoError(t, err)

	claim := func() []string {
		envs, err := d.Claim(ctx, herald.ClaimParams{Token: herald.NewID(), Owner: "test", Limit: 10, Lease: time.Minute})
		require.NoError(t, err)
		var ids []string
		for _, e := range envs {
			ids = append(ids, e.ID)
		}
		return ids
	}
	require.Equal(t, []string{two.ID}, claim(), "k1 is being decided elsewhere: skipped")
	require.NoError(t, other.Rollback(ctx))
	require.Equal(t, []string{one.ID}, claim(), "k1 once the lock is gone")
}
