package heraldcdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
)

// A PostgreSQL database heraldspec opened reads its outbox's log through
// heraldspec: opening it switches nothing (the relay's Start makes the
// inserts streamed once it holds the source), and once they are streamed
// the source hands out what the spec's writer commits.
func TestOpenSourceThroughHeraldspec(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pc := testenv.PrivateCluster(t)
	p, o, err := heraldspec.OpenDatabase(ctx, heraldspec.Database{DSN: pc.DSN, Logger: heralddrivertest.Logger(t)})
	require.NoError(t, err)
	defer o.Close()
	require.NoError(t, o.Store.Migrate(ctx))
	store := o.Store.(*heraldpg.Driver)
	insertState := func() string {
		state, err := store.InsertState(ctx)
		require.NoError(t, err)
		return state
	}

	_, err = p.OpenSource(ctx, o, &struct{}{})
	require.ErrorContains(t, err, "not a *heraldcdc.Config")
	_, err = p.OpenSource(ctx, o, &heraldcdc.Config{})
	require.ErrorContains(t, err, "or start once with Config.CreateSlot", "no publication nor slot, and none asked for")
	require.Equal(t, "ready", insertState(), "without a slot, rows inserted as streamed would be read by no one")

	src, err := p.OpenSource(ctx, o, &heraldcdc.Config{CreateSlot: true, StatusInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	defer func() { require.NoError(t, src.Close()) }()
	require.Equal(t, "ready", insertState(), "the relay's Start switches, not the source")
	require.NoError(t, store.StreamInserts(ctx, true)) // what Relay.Start does with this source
	require.Equal(t, "streamed", insertState())

	pool := o.Client.(*pgxpool.Pool)
	w := o.Writer.(*herald.Writer[pgx.Tx])
	id := herald.NewID()
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return w.WriteTx(ctx, tx, herald.Message{ID: id, Topic: "orders", Key: "a", Payload: []byte("x")})
	}))
	next, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	batch, err := src.Next(next, 10)
	require.NoError(t, err)
	require.Len(t, batch.Events, 1)
	require.Equal(t, id, batch.Events[0].ID)
	batch.Done()
}
