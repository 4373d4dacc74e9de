package heralddrivertest

import (
	"bytes"
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// writeCases check the writer and the transaction it joins: what commits,
// what vanishes, what is refused, and what a row keeps of its message.
var writeCases = []testCase{
	{"WriteThenCommitMakesRowsReady", func(t *testing.T, o *Kit) {
		ids := o.Write(msg("orders"), msg("orders"), msg("payments"))
		require.Equal(t, map[string]int64{"orders/ready": 2, "payments/ready": 1}, o.Counts())

		rows := o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})
		require.Equal(t, ids, rowIDs(rows), "listed in write order")
		for i, ev := range rows {
			require.Equal(t, heraldadmin.StateReady, ev.State)
			require.Zero(t, ev.Attempt)
			require.Empty(t, ev.ClaimedBy)
			require.Nil(t, ev.LeaseUntil)
			require.Nil(t, ev.PublishedAt)
			require.Nil(t, ev.DeadAt)
			require.Empty(t, ev.LastError)
			require.WithinDuration(t, time.Now(), ev.CreatedAt, clockSkew)
			require.WithinDuration(t, ev.CreatedAt, ev.AvailableAt, time.Second,
				"without AvailableAt a message is available when written")
			if i > 0 {
				require.Greater(t, ev.Seq, rows[i-1].Seq, "seq increases in write order")
			}
		}
		_, envs := o.Claim(10, time.Minute)
		require.Equal(t, ids, envIDs(envs))
	}},

	{"WriteThenRollbackLeavesNothing", func(t *testing.T, o *Kit) {
		ghosts := []herald.Message{msg("t"), msg("t")}
		require.NoError(t, o.d.Write(o.ctx(), ghosts, false))
		kept := o.Write(msg("t"))
		for _, g := range ghosts {
			o.requireGone(g.ID)
		}
		require.Equal(t, kept, rowIDs(o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady})))
		_, envs := o.Claim(10, time.Minute)
		require.Equal(t, kept, envIDs(envs), "a rolled-back message is never claimable")
		_, envs = o.Claim(10, time.Minute)
		require.Empty(t, envs)
		require.Equal(t, map[string]int64{"t/claimed": 1}, o.Counts())
	}},

	{"InvalidMessageWritesNothing", func(t *testing.T, o *Kit) {
		for _, tc := range []struct {
			field string
			bad   herald.Message
		}{
			{"topic", herald.Message{}},
			{"topic", herald.Message{Topic: "has space"}},
			{"id", herald.Message{Topic: "t", ID: "not-a-uuid"}},
			{"type", herald.Message{Topic: "t", Type: "nul\x00"}},
			{"headers", herald.Message{Topic: "t", Headers: map[string]string{"Herald-Id": "forged"}}},
			{"headers[X-A]", herald.Message{Topic: "t", Headers: map[string]string{"X-A": "a\r\nb"}}},
			{"payload", herald.Message{Topic: "t", Payload: make([]byte, o.d.payloadCap()+1)}},
		} {
			valid := msg("t")
			err := o.d.Write(o.ctx(), []herald.Message{valid, tc.bad}, true)
			var ve *herald.ValidationError
			require.ErrorAs(t, err, &ve, "field %s", tc.field)
			require.ErrorIs(t, err, herald.ErrInvalidMessage)
			require.Equal(t, 1, ve.Index, "the second message is the invalid one")
			require.Equal(t, tc.field, ve.Field)
			o.requireGone(valid.ID)

			// The writer refuses the whole call before it writes anything:
			// a caller that commits anyway commits no part of it.
			tx := o.begin()
			require.ErrorIs(t, tx.Write(o.ctx(), valid, tc.bad), herald.ErrInvalidMessage)
			require.NoError(t, tx.Commit(o.ctx()))
			o.requireGone(valid.ID)
		}
		require.Empty(t, o.Counts(), "nothing was written")
	}},

	{"HeadersAndFieldsRoundTrip", func(t *testing.T, o *Kit) {
		payload := make([]byte, 256)
		for i := range payload {
			payload[i] = byte(i)
		}
		at := time.Now().Add(-time.Hour).Truncate(time.Microsecond)
		full := herald.Message{
			// Upper case: the id is stored, returned and found in its
			// canonical lower-case form.
			ID:    strings.ToUpper(herald.NewID()),
			Topic: "orders.placed", Type: "order.placed", AggregateType: "order", AggregateID: "42",
			Payload: payload,
			Headers: map[string]string{
				"X-Tenant":    "acme",
				"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"X-Text":      `héllo, wörld ✓ "quoted" \back\slash {"json":1}`,
				"X-Empty":     "",
			},
			AvailableAt: at,
		}
		keyed := herald.Message{Topic: "orders.placed", Key: "customer-7", AggregateID: "42"}
		ids := o.Write(full, keyed)
		id := strings.ToLower(full.ID)

		_, envs := o.Claim(10, time.Minute)
		require.Len(t, envs, 2)
		byID := map[string]herald.Envelope{envs[0].ID: envs[0], envs[1].ID: envs[1]}
		env, ok := byID[id]
		require.True(t, ok, "claimed %v, want %s among them", envIDs(envs), id)
		require.Equal(t, 1, env.Attempt)
		require.Positive(t, env.Seq)
		require.WithinDuration(t, time.Now(), env.CreatedAt, clockSkew)

		row, err := o.d.Admin.GetEvent(o.ctx(), full.ID) // upper case on purpose
		require.NoError(t, err)
		for src, got := range map[string]herald.Message{"claim": env.Message, "GetEvent": row.Message} {
			require.Equal(t, id, got.ID, src)
			require.Equal(t, full.Topic, got.Topic, src)
			require.Equal(t, "42", got.Key, "%s: the key defaults to the aggregate id", src)
			require.Equal(t, full.Type, got.Type, src)
			require.Equal(t, full.AggregateType, got.AggregateType, src)
			require.Equal(t, full.AggregateID, got.AggregateID, src)
			require.Equal(t, payload, got.Payload, "%s: every byte value survives", src)
			require.Equal(t, full.Headers, got.Headers, src)
		}
		require.Equal(t, env.Seq, row.Seq)
		require.True(t, row.CreatedAt.Equal(env.CreatedAt), "created_at %v by GetEvent, %v by Claim", row.CreatedAt, env.CreatedAt)
		require.True(t, row.AvailableAt.Equal(at), "available_at %v, want %v", row.AvailableAt, at)

		other := byID[ids[1]]
		require.Equal(t, "customer-7", other.Key, "an explicit key is kept")
		require.Empty(t, other.Payload)
		require.Empty(t, other.Headers)
		row = o.Get(ids[1])
		require.Equal(t, "customer-7", row.Key)
		require.Empty(t, row.Payload)
		require.Empty(t, row.Headers)
	}},

	{"LargePayloadAtTheCap", func(t *testing.T, o *Kit) {
		limit := o.d.payloadCap()
		big := make([]byte, limit)
		for i := range big {
			big[i] = byte(i*7 + i>>8)
		}
		id := o.Write(herald.Message{Topic: "big", Payload: big})[0]
		_, envs := o.Claim(1, time.Minute)
		require.Len(t, envs, 1)
		// bytes.Equal, not require.Equal: a diff of a MiB helps nobody.
		require.True(t, bytes.Equal(big, envs[0].Payload), "claimed payload of %d bytes differs from the %d written", len(envs[0].Payload), limit)
		require.True(t, bytes.Equal(big, o.Get(id).Payload), "stored payload differs from the %d bytes written", limit)

		over := herald.Message{ID: herald.NewID(), Topic: "big", Payload: append(big, 0x01)}
		err := o.d.Write(o.ctx(), []herald.Message{over}, true)
		var ve *herald.ValidationError
		require.ErrorAs(t, err, &ve)
		require.Equal(t, "payload", ve.Field)
		o.requireGone(over.ID)
		require.Equal(t, map[string]int64{"big/claimed": 1}, o.Counts())
	}},

	{"EventsCommitAndVanishWithTheirBusinessRows", func(t *testing.T, o *Kit) {
		ctx := o.ctx()
		// Committed: the order and its event.
		placed := msg("orders")
		tx := o.begin()
		require.NoError(t, tx.Record(ctx, "order-1"))
		require.NoError(t, tx.Write(ctx, placed))
		require.NoError(t, tx.Commit(ctx))

		// Rolled back: neither.
		ghost := msg("orders")
		tx = o.begin()
		require.NoError(t, tx.Record(ctx, "order-2"))
		require.NoError(t, tx.Write(ctx, ghost))
		require.NoError(t, tx.Rollback(ctx))

		// The business write fails after the event was written (a
		// duplicate order); the application rolls back: neither.
		late := msg("orders")
		tx = o.begin()
		require.NoError(t, tx.Write(ctx, late))
		require.Error(t, tx.Record(ctx, "order-1"), "a second order-1 breaks the unique constraint")
		require.NoError(t, tx.Rollback(ctx))

		rows, err := o.d.BusinessRows(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"order-1"}, rows)
		o.requireGone(ghost.ID)
		o.requireGone(late.ID)
		_, envs := o.Claim(10, time.Minute)
		require.Equal(t, []string{placed.ID}, envIDs(envs), "only the committed transaction's event is claimable")
	}},

	{"ManyMessagesInOneCallKeepTheirOrder", func(t *testing.T, o *Kit) {
		// More messages than one statement of some drivers carries.
		msgs := make([]herald.Message, 1200)
		for i := range msgs {
			msgs[i] = keyed("t", "k")
		}
		ids := o.Write(msgs...)
		rows := o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady, Limit: len(ids) + 1})
		require.Equal(t, ids, rowIDs(rows), "seq order is write order")
		_, envs := o.Claim(len(ids), time.Minute)
		require.Equal(t, ids, envIDs(envs))
	}},

	{"PlainSQLInsertIsClaimable", func(t *testing.T, o *Kit) {
		// The contract for programs in other languages: topic, key and
		// payload, every other column left to its default.
		var ids []string
		for range 20 {
			id, err := o.d.InsertPlain(o.ctx(), "orders", "order-42", []byte(`{"total":4200}`), "")
			require.NoError(t, err)
			ids = append(ids, id)
		}
		require.Len(t, slices.Compact(slices.Sorted(slices.Values(ids))), len(ids), "default ids are distinct")
		_, envs := o.Claim(len(ids)+1, time.Minute)
		require.Equal(t, ids, envIDs(envs), "claimed in insert order")
		for _, e := range envs {
			u, err := uuid.Parse(e.ID)
			require.NoError(t, err, "the default id is a UUID")
			require.Equal(t, u.String(), e.ID, "in canonical lower-case text")
			require.Equal(t, uuid.Version(4), u.Version())
			require.Equal(t, uuid.RFC4122, u.Variant())
			require.Equal(t, "orders", e.Topic)
			require.Equal(t, "order-42", e.Key)
			require.Empty(t, e.Type)
			require.Empty(t, e.AggregateType)
			require.Empty(t, e.AggregateID)
			require.Equal(t, []byte(`{"total":4200}`), e.Payload)
			require.Empty(t, e.Headers)
			require.Equal(t, 1, e.Attempt)
			require.Equal(t, 1, e.EventVersion, "a plain insert is event version 1")
			require.Zero(t, e.AggregateVersion, "and has no aggregate version")
			require.WithinDuration(t, time.Now(), e.CreatedAt, clockSkew)
		}
	}},

	{"VersionsGoFromWriterToEveryClaim", func(t *testing.T, o *Kit) {
		// Both claim forms (per-key and unordered) and the operators'
		// listing read the two version columns; a message without them
		// is event version 1 with no aggregate version.
		versioned := func(m herald.Message, ev int, av int64) herald.Message {
			m.EventVersion, m.AggregateVersion = ev, av
			return m
		}
		want := map[string][2]int64{}
		var msgs []herald.Message
		for _, m := range []herald.Message{
			versioned(keyed("orders", "order-1"), 3, 42),
			versioned(keyed("orders", "order-2"), 0, 0),
			versioned(msg("audit"), herald.MaxEventVersion, math.MaxInt64),
			versioned(msg("audit"), 2, 1),
		} {
			ev := max(m.EventVersion, 1)
			want[m.ID] = [2]int64{int64(ev), m.AggregateVersion}
			msgs = append(msgs, m)
		}
		o.Write(msgs...)
		for _, r := range o.list(heraldadmin.EventFilter{All: true, State: heraldadmin.StateReady}) {
			require.Equal(t, want[r.ID], [2]int64{int64(r.EventVersion), r.AggregateVersion}, "listed %s", r.ID)
		}
		got := map[string][2]int64{}
		for _, unordered := range []bool{false, true} {
			_, envs := o.claimP(herald.ClaimParams{Limit: 10, Unordered: unordered})
			for _, e := range envs {
				got[e.ID] = [2]int64{int64(e.EventVersion), e.AggregateVersion}
			}
		}
		require.Equal(t, want, got, "every event claimed once, with its versions")
	}},

	{"PlainSQLVersionsAreCheckedByTheTable", func(t *testing.T, o *Kit) {
		if o.d.InsertVersioned == nil {
			t.Skip("the harness has no InsertVersioned")
		}
		aggregate := func(v int64) *int64 { return &v }
		good, err := o.d.InsertVersioned(o.ctx(), "orders", []byte("x"), 5, aggregate(9))
		require.NoError(t, err)
		plain, err := o.d.InsertVersioned(o.ctx(), "orders", []byte("x"), 1, nil)
		require.NoError(t, err)
		for _, bad := range []struct {
			event     int64
			aggregate *int64
		}{
			{0, nil}, {-1, nil}, {math.MaxInt32 + 1, nil}, {1, aggregate(0)}, {1, aggregate(-7)},
		} {
			_, err := o.d.InsertVersioned(o.ctx(), "orders", []byte("x"), bad.event, bad.aggregate)
			require.Error(t, err, "the table refuses event_version %d, aggregate_version %v", bad.event, bad.aggregate)
		}
		require.Equal(t, map[string]int64{"orders/ready": 2}, o.Counts(), "a refused insert leaves nothing")
		_, envs := o.claimP(herald.ClaimParams{Limit: 10, Unordered: true})
		require.Equal(t, []string{good, plain}, envIDs(envs))
		require.Equal(t, 5, envs[0].EventVersion)
		require.Equal(t, int64(9), envs[0].AggregateVersion)
		require.Equal(t, 1, envs[1].EventVersion)
		require.Zero(t, envs[1].AggregateVersion)
	}},
}

// begin opens a transaction, rolled back at the end of the test unless it
// was committed or rolled back before.
func (o *Kit) begin() Tx {
	o.t.Helper()
	tx, err := o.d.Begin(o.ctx())
	require.NoError(o.t, err)
	o.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}
