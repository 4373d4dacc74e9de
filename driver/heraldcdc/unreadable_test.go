package heraldcdc_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	kit "github.com/herald-outbox/herald/heraldtest"
)

// A streamed row the relay cannot read (here a header that is a number,
// from plain SQL) is a dead letter, as a claim of it would make it: dead,
// saying why, and, its key being ordered, parking the key, with the key's
// later events held in the table behind it and none of them published.
// Other keys go on. That holds when the producer deleted the row in its
// transaction (the zero-bloat mode), where the dead letter is written from
// what the relay read, and when the row stayed, which keeps its columns
// as the producer wrote them.
func TestAnUnreadableRowIsADeadLetterThatParksItsKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	rec := &kit.Recorder{}
	startRelay(t, f.driver(t), f.cdcSource(t), rec)
	deleting, err := heraldpg.NewWriter(&heraldpg.Config{DeleteAfterInsert: true})
	require.NoError(t, err)
	event := func(key, payload string) herald.Message {
		return herald.Message{ID: herald.NewID(), Topic: "orders", Key: key, Payload: []byte(payload)}
	}
	badRow := func(tx pgx.Tx, key string, deleted bool) string {
		var id string
		require.NoError(t, tx.QueryRow(ctx, `INSERT INTO herald_outbox (topic, key, payload, headers)
			VALUES ('orders', $1, 'unreadable', '{"n": 1}') RETURNING id::text`, key).Scan(&id))
		if deleted {
			_, err := tx.Exec(ctx, `DELETE FROM herald_outbox WHERE id = $1 AND state = 'streamed'`, id)
			require.NoError(t, err)
		}
		return id
	}

	var gone, kept string
	held := []herald.Message{event("gone", "after-1"), event("gone", "after-2"), event("kept", "after-1")}
	others := []herald.Message{event("other", "1"), event("other", "2"), event("other", "3")}
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		if err := deleting.WriteTx(ctx, tx, others[0]); err != nil {
			return err
		}
		gone = badRow(tx, "gone", true)
		return deleting.WriteTx(ctx, tx, held[0], others[1])
	}))
	require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
		kept = badRow(tx, "kept", false)
		return deleting.WriteTx(ctx, tx, held[1], held[2], others[2])
	}))
	written := f.walInsert(t)

	waitAllPublished(t, rec, map[string][]string{"other": {others[0].ID, others[1].ID, others[2].ID}})
	require.Eventually(t, func() bool { return f.slotConfirmed(t) >= written }, 60*time.Second, 20*time.Millisecond,
		"the slot's confirmed position moves past the writes")

	first, seen := firstPublishedByKey(rec)
	require.Equal(t, []string{others[0].ID, others[1].ID, others[2].ID}, first["other"], "another key goes on, in order")
	for _, id := range []string{gone, kept, held[0].ID, held[1].ID, held[2].ID} {
		require.False(t, seen[id], "event %s published past or as an unreadable row", id)
	}
	rows := f.rows(t, []string{gone, kept, held[0].ID, held[1].ID, held[2].ID})
	for _, id := range []string{gone, kept} {
		require.Equal(t, "dead", rows[id].state, "the unreadable row")
		require.True(t, rows[id].parked, "its key is parked")
		require.Equal(t, `herald: unreadable row: column headers: header "n" is a number, not a string`, rows[id].lastError,
			"it says why, as a claim's unreadable row does")
	}
	for _, m := range held {
		require.Equal(t, "ready", rows[m.ID].state, "event %s of key %s waits behind the dead letter", m.ID, m.Key)
	}

	var headers, payload string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT headers::text, convert_from(payload, 'UTF8') FROM herald_outbox WHERE id = $1`,
		kept).Scan(&headers, &payload))
	require.Equal(t, `{"n": 1}`, headers, "a row that stayed keeps what the producer wrote")
	var key string
	require.NoError(t, f.pool.QueryRow(ctx, `SELECT key, convert_from(payload, 'UTF8') FROM herald_outbox WHERE id = $1`,
		gone).Scan(&key, &payload))
	require.Equal(t, [2]string{"gone", "unreadable"}, [2]string{key, payload}, "a deleted row's dead letter holds what was read")
}
