package heraldcdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	kit "github.com/herald-outbox/herald/heraldtest" // the users' test kit (Recorder), not internal/testenv
	"github.com/herald-outbox/herald/internal/testenv"
)

// An event written with a delay (Message.AvailableAt), as a row or as a
// logical decoding message, is not published from the log before it is
// due: the relay writes it back, held with its AvailableAt, behind which
// its key's later event waits, and a claim publishes both once it is due,
// in order. An event of another key written after it is published from
// the log at once.
func TestDelayedEventsWaitInTheTableUntilDue(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	rec := &kit.Recorder{}
	startRelay(t, f.driver(t), f.cdcSource(t), rec)
	inserting, err := heraldpg.NewWriter(&heraldpg.Config{})
	require.NoError(t, err)
	emitting, err := heraldpg.NewWriter(&heraldpg.Config{EmitMessages: true})
	require.NoError(t, err)

	var dbNow time.Time
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow))
	due := dbNow.Add(3 * time.Second).Truncate(time.Microsecond)
	msg := func(key string, delayed bool) herald.Message {
		m := herald.Message{ID: herald.NewID(), Topic: "orders", Key: key, Payload: []byte(key)}
		if delayed {
			m.AvailableAt = due
		}
		return m
	}
	rowDelayed, rowBehind := msg("row", true), msg("row", false)
	emitDelayed, emitBehind := msg("emit", true), msg("emit", false)
	other := msg("other", false)
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if err := inserting.WriteTx(ctx, tx, rowDelayed, rowBehind); err != nil {
			return err
		}
		return emitting.WriteTx(ctx, tx, emitDelayed, emitBehind)
	}))
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error { return inserting.WriteTx(ctx, tx, other) }))

	wait, cancel := context.WithTimeout(ctx, relayTimeout)
	defer cancel()
	require.NoError(t, rec.WaitUntil(wait, func(results []kit.Result) bool {
		return len(rec.Published()) == 5
	}), "every event is published")

	published := rec.Published()
	order := map[string]int{}
	for i, env := range published {
		order[env.ID] = i
	}
	require.Less(t, order[other.ID], order[rowDelayed.ID], "another key's later event does not wait")
	require.Less(t, order[other.ID], order[emitDelayed.ID], "another key's later event does not wait")
	require.Less(t, order[rowDelayed.ID], order[rowBehind.ID], "the key keeps its order")
	require.Less(t, order[emitDelayed.ID], order[emitBehind.ID], "the key keeps its order")

	// The delayed events and their keys' later ones went through the
	// table, claimed no earlier than their time by the database clock;
	// the other key's row stayed as the log's history.
	type kept struct {
		state              string
		available, publish time.Time
		attempts           int
	}
	var got map[string]kept
	require.Eventually(t, func() bool {
		rows, err := f.pool.Query(ctx, `SELECT id::text, state, available_at, coalesce(published_at, 'epoch'), attempts
			FROM herald_outbox WHERE id = ANY($1::uuid[])`,
			[]string{rowDelayed.ID, rowBehind.ID, emitDelayed.ID, emitBehind.ID})
		require.NoError(t, err)
		got = map[string]kept{}
		for rows.Next() {
			var (
				id string
				k  kept
			)
			require.NoError(t, rows.Scan(&id, &k.state, &k.available, &k.publish, &k.attempts))
			got[id] = k
		}
		require.NoError(t, rows.Err())
		for _, k := range got {
			if k.state != "published" {
				return false
			}
		}
		return len(got) == 4
	}, relayTimeout, 20*time.Millisecond, "the delayed events and those behind them are published from the table")
	for _, id := range []string{rowDelayed.ID, emitDelayed.ID} {
		require.Equal(t, "published", got[id].state, id)
		require.True(t, got[id].available.Equal(due), "the event keeps its AvailableAt: %v, want %v", got[id].available, due)
		require.False(t, got[id].publish.Before(due), "published at %v, before its time %v", got[id].publish, due)
		require.Equal(t, 1, got[id].attempts, "the held attempt is refunded; one claim")
	}
	var state string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT state FROM herald_outbox WHERE id = $1`, other.ID).Scan(&state))
	require.Equal(t, "streamed", state, "the other key's event was published from the log, its row never claimed")
}
