package heraldcdc_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The table-less write mode (heraldpg.Config.EmitMessages): the producer
// writes each event as a transactional logical decoding message, and
// the relay publishes it from the WAL at its transaction's commit, in
// commit order with the rows other transactions insert for the same
// keys; a rolled-back transaction's messages never come. A failure goes
// to the table as ever: Return inserts the event, and the polling path
// retries it in order with its key's later events. A message whose
// fields cannot all be read becomes a dead row saying why.
func TestEmittedEventsArePublishedFromTheLog(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	ctx := context.Background()
	emitting, err := heraldpg.NewWriter(&heraldpg.Config{EmitMessages: true})
	require.NoError(t, err)
	inserting, err := heraldpg.NewWriter(&heraldpg.Config{})
	require.NoError(t, err)
	// Key k2's fourth event, a message, fails once; its later events,
	// rows and messages, follow it through the table.
	const failing = "k2-03"
	rec := startFailOnceRelay(t, f, failing)

	var (
		byKey   = map[string][]string{} // key -> ids in commit order
		byName  = map[string]string{}   // payload -> id
		emitted = map[string]bool{}     // ids written as messages
		counter = map[string]int{}
	)
	next := func(key string) herald.Message {
		name := fmt.Sprintf("%s-%02d", key, counter[key])
		counter[key]++
		m := herald.Message{ID: herald.NewID(), Topic: "orders", Key: key, Payload: []byte(name)}
		byName[name] = m.ID
		return m
	}
	commit := func(write func(tx pgx.Tx) ([]herald.Message, error)) {
		t.Helper()
		var msgs []herald.Message
		require.NoError(t, pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) (err error) {
			msgs, err = write(tx)
			return err
		}))
		for _, m := range msgs {
			byKey[m.Key] = append(byKey[m.Key], m.ID)
		}
	}
	const keys = 4
	// Nine transactions over four keys, in turn: messages in one WriteTx
	// (two per key), rows (one per key), one WriteTx per message.
	for i := range 9 {
		commit(func(tx pgx.Tx) ([]herald.Message, error) {
			var msgs []herald.Message
			for k := range keys {
				for range 2 - min(i%3, 1) {
					msgs = append(msgs, next(fmt.Sprintf("k%d", k)))
				}
			}
			switch i % 3 {
			case 0:
				for _, m := range msgs {
					emitted[m.ID] = true
				}
				return msgs, emitting.WriteTx(ctx, tx, msgs...)
			case 1:
				return msgs, inserting.WriteTx(ctx, tx, msgs...)
			}
			for _, m := range msgs {
				emitted[m.ID] = true
				if err := emitting.WriteTx(ctx, tx, m); err != nil {
					return nil, err
				}
			}
			return msgs, nil
		})
	}
	// Rows and messages of one key in one transaction, in their order.
	commit(func(tx pgx.Tx) ([]herald.Message, error) {
		msgs := []herald.Message{next("k0"), next("k0"), next("k0")}
		emitted[msgs[0].ID], emitted[msgs[2].ID] = true, true
		for i, m := range msgs {
			w := emitting
			if i == 1 {
				w = inserting
			}
			if err := w.WriteTx(ctx, tx, m); err != nil {
				return nil, err
			}
		}
		return msgs, nil
	})
	// The README's plain SQL form, with its seq and without.
	commit(func(tx pgx.Tx) ([]herald.Message, error) {
		msgs := []herald.Message{next("k3"), next("k3")}
		for i, m := range msgs {
			emitted[m.ID] = true
			seq := `'seq', nextval(pg_get_serial_sequence('herald_outbox', 'seq')), `
			if i == 1 {
				seq = ""
			}
			_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'herald.event:public.herald_outbox',
				json_build_object('id', $1::uuid, `+seq+`'topic', 'orders', 'key', $2::text,
				                  'payload', encode(convert_to($3::text, 'UTF8'), 'base64'), 'created_at', now())::text)`,
				m.ID, m.Key, string(m.Payload))
			if err != nil {
				return nil, err
			}
		}
		return msgs, nil
	})
	// Never committed: never published.
	rolledBack := next("k1")
	tx, err := f.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, emitting.WriteTx(ctx, tx, rolledBack, next("k1")))
	require.NoError(t, tx.Rollback(ctx))
	// A payload that is not base64: a dead letter, saying why.
	bad := herald.NewID()
	_, err = f.pool.Exec(ctx, `SELECT pg_logical_emit_message(true, 'herald.event:public.herald_outbox',
		json_build_object('id', $1::uuid, 'topic', 'orders', 'key', 'bad', 'payload', '{"total":4200}')::text)`, bad)
	require.NoError(t, err)
	written := f.walInsert(t)

	waitAllPublished(t, rec, byKey)
	require.Eventually(t, func() bool { return f.slotConfirmed(t) >= written }, 60*time.Second, 20*time.Millisecond,
		"the slot's confirmed position moves past the writes")
	var state, lastError string
	require.Eventually(t, func() bool {
		err := f.pool.QueryRow(ctx, `SELECT state, coalesce(last_error, '') FROM herald_outbox WHERE id = $1`, bad).Scan(&state, &lastError)
		return err == nil && state == "dead"
	}, 30*time.Second, 20*time.Millisecond, "the unreadable message is a dead row")
	require.True(t, strings.HasPrefix(lastError, "herald: unreadable event message: payload: illegal base64"),
		"the last error says why, as a claim's unreadable row does: %q", lastError)

	t.Run("EachKeyIsPublishedInCommitOrder", func(t *testing.T) {
		first, seen := firstPublishedByKey(rec)
		require.Equal(t, byKey, first)
		require.False(t, seen[rolledBack.ID], "a rolled-back message is never published")
		require.False(t, seen[bad], "an unreadable message is never published")
	})

	t.Run("TheFailedMessageIsRetriedFromTheTable", func(t *testing.T) {
		requireFailedOnceThenPublished(t, rec, byName[failing])
	})

	// A message leaves a row only when it was written back: the failed
	// one, the later events of its key held back behind it, and the
	// dead letter.
	t.Run("MessagesLeaveNoRowUnlessWrittenBack", func(t *testing.T) {
		rows, err := f.pool.Query(ctx, `SELECT id::text, key, state, attempts FROM herald_outbox`)
		require.NoError(t, err)
		later := map[string]bool{}
		for _, id := range byKey["k2"][3:] {
			later[id] = true
		}
		for rows.Next() {
			var (
				id, key, state string
				attempts       int
			)
			require.NoError(t, rows.Scan(&id, &key, &state, &attempts))
			switch {
			case id == byName[failing]:
				require.Equal(t, "published", state)
				require.Equal(t, 2, attempts, "the stream's attempt and one claim")
			case id == bad:
			case emitted[id]:
				require.True(t, later[id], "message %s of key %s has a row", id, key)
				require.Equal(t, "published", state)
			}
		}
		require.NoError(t, rows.Err())
		require.True(t, emitted[byName[failing]], "the failed event is a message")
	})
}
