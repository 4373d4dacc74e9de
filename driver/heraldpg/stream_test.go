package heraldpg

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/testenv"
)

// streamOutbox is a migrated outbox in a schema of its own, for the
// change-data-capture side of the driver (stream.go).
type streamOutbox struct {
	t    *testing.T
	pool *pgxpool.Pool
	d    *Driver
}

func newStreamOutbox(t *testing.T) *streamOutbox {
	t.Helper()
	pool := testenv.PostgresPool(t)
	d, err := New(pool, &Config{Schema: testenv.Schema(t)})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(t.Context()))
	return &streamOutbox{t: t, pool: pool, d: d}
}

// insert writes a row of topic and key with the extra columns given
// (SQL, after the key) and returns its id.
func (o *streamOutbox) insert(topic, key, cols, values string) string {
	o.t.Helper()
	if cols != "" {
		cols, values = ", "+cols, ", "+values
	}
	var id string
	require.NoError(o.t, o.pool.QueryRow(o.t.Context(), `INSERT INTO `+o.d.Table()+` (topic, key, payload`+cols+`)
		VALUES ($1, $2, 'x'`+values+`) RETURNING id::text`, topic, key).Scan(&id))
	return id
}

// streamed inserts a streamed row, as a producer does while a
// change-data-capture relay runs, and returns it as the source hands it
// to the relay: attempt 1.
func (o *streamOutbox) streamed(topic, key string) herald.Envelope {
	o.t.Helper()
	id := o.insert(topic, key, `state, type, aggregate_type, aggregate_id, headers, event_version, aggregate_version`,
		`'streamed', 'order.placed', 'order', '42', '{"trace":"abc"}', 3, 7`)
	env := o.get(id).Envelope
	env.Attempt = 1
	return env
}

func (o *streamOutbox) get(id string) heraldadmin.EventRow {
	o.t.Helper()
	ev, err := o.d.GetEvent(o.t.Context(), id)
	require.NoError(o.t, err)
	return ev
}

func (o *streamOutbox) exec(sql string, args ...any) {
	o.t.Helper()
	_, err := o.pool.Exec(o.t.Context(), sql, args...)
	require.NoError(o.t, err, sql)
}

func (o *streamOutbox) returnRows(p herald.ReturnParams) int {
	o.t.Helper()
	n, err := o.d.Return(o.t.Context(), p)
	require.NoError(o.t, err)
	return n
}

func (o *streamOutbox) claim(unordered bool) []herald.Envelope {
	o.t.Helper()
	envs, err := o.d.Claim(o.t.Context(), herald.ClaimParams{Token: uuid.NewString(), Owner: "test", Limit: 100,
		Lease: time.Minute, Unordered: unordered})
	require.NoError(o.t, err)
	return envs
}

func envIDs(envs []herald.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

// around requires t to be about d from now.
func around(t *testing.T, at time.Time, d time.Duration, what string) {
	t.Helper()
	require.WithinDuration(t, time.Now().Add(d), at, 5*time.Second, what)
}

func TestKeysWaiting(t *testing.T) {
	t.Parallel()

	t.Run("KeysWaitingFindsReadyClaimedAndParkedKeys", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		o.insert("t", "ready", "", "")
		o.insert("t", "claimed", "state, claim_token, lease_until", "'claimed', gen_random_uuid(), now() + interval '1 minute'")
		o.insert("t", "parked", "state, dead_at, parked", "'dead', now(), true")
		o.insert("t", "streamed", "state", "'streamed'")
		o.insert("t", "published", "state, published_at", "'published', now()")
		o.insert("t", "dead", "state, dead_at", "'dead', now()")
		o.insert("other", "elsewhere", "", "")

		keys := []herald.TopicKey{
			{Topic: "t", Key: "parked"}, {Topic: "t", Key: "streamed"}, {Topic: "t", Key: "ready"},
			{Topic: "t", Key: "published"}, {Topic: "t", Key: "dead"}, {Topic: "t", Key: "elsewhere"},
			{Topic: "t", Key: "claimed"}, {Topic: "t", Key: "none"},
		}
		got, err := o.d.KeysWaiting(t.Context(), keys)
		require.NoError(t, err)
		require.Equal(t, []herald.TopicKey{{Topic: "t", Key: "parked"}, {Topic: "t", Key: "ready"}, {Topic: "t", Key: "claimed"}},
			got, "in the order given; a key is of its topic")

		got, err = o.d.KeysWaiting(t.Context(), nil)
		require.NoError(t, err)
		require.Nil(t, got)
	})

	// The call's first check, whether any row waits at all, finds each
	// kind of waiting row alone; with none, no key waits.
	t.Run("KeysWaitingFindsEachKindAlone", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct{ key, cols, vals string }{
			{"ready", "", ""},
			{"claimed", "state, claim_token, lease_until", "'claimed', gen_random_uuid(), now() + interval '1 minute'"},
			{"parked", "state, dead_at, parked", "'dead', now(), true"},
			{"", "", ""},
		} {
			o := newStreamOutbox(t)
			o.insert("t", "streamed", "state", "'streamed'")
			o.insert("t", "published", "state, published_at", "'published', now()")
			o.insert("t", "dead", "state, dead_at", "'dead', now()")
			keys := []herald.TopicKey{{Topic: "t", Key: "streamed"}, {Topic: "t", Key: "published"}, {Topic: "t", Key: "dead"}}
			var want []herald.TopicKey
			if c.key != "" {
				o.insert("t", c.key, c.cols, c.vals)
				keys = append(keys, herald.TopicKey{Topic: "t", Key: c.key})
				want = []herald.TopicKey{{Topic: "t", Key: c.key}}
			}
			got, err := o.d.KeysWaiting(t.Context(), keys)
			require.NoError(t, err)
			require.Equal(t, want, got, "a %q row alone", c.key)
		}
	})

	t.Run("KeysWaitingIsIndexProbesWhateverThePlan", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		o.exec(`ALTER TABLE ` + o.d.Table() + ` SET (autovacuum_enabled = false)`)
		o.exec(`INSERT INTO ` + o.d.Table() + ` (topic, key, payload, state)
			SELECT 'new', 'k' || (g % 1000), '\x00', 'streamed' FROM generate_series(1, 200000) g`)
		o.exec(`INSERT INTO ` + o.d.Table() + ` (topic, key, payload)
			SELECT 'new', 'k' || (g % 1000), '\x00' FROM generate_series(1, 20000) g`)
		check := func(stats string) {
			t.Helper()
			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				plan := explainPrepared(t, o.pool, mode, o.d.q.keysWaiting,
					`ARRAY['new','new','new'], ARRAY['k1','k2','absent']`)
				what := fmt.Sprintf("%s, %s:\n%s", stats, mode, plan)
				require.NotContains(t, plan, "Seq Scan", what)
				require.NotContains(t, strings.ToLower(plan), "hash", what)
				require.Contains(t, plan, "herald_outbox_key_idx", what)
				require.Contains(t, plan, "herald_outbox_blocked_idx", what)
			}
		}
		check("never analyzed")
		o.exec(`ANALYZE ` + o.d.Table())
		check("analyzed with nothing claimed")
		// Relays' claims in flight and parked keys, which statistics call
		// none: what a hashed subplan would read whole on every call.
		o.exec(`INSERT INTO ` + o.d.Table() + ` (topic, key, payload, state, claim_token, lease_until)
			SELECT 'new', 'c' || g, '\x00', 'claimed', gen_random_uuid(), now() + interval '1 minute'
			FROM generate_series(1, 5000) g`)
		o.exec(`INSERT INTO ` + o.d.Table() + ` (topic, key, payload, state, dead_at, parked)
			SELECT 'new', 'p' || g, '\x00', 'dead', now(), true FROM generate_series(1, 1000) g`)
		check("analyzed before the claims")
		o.exec(`ANALYZE ` + o.d.Table())
		check("analyzed")
	})
}

func TestReturn(t *testing.T) {
	t.Parallel()

	t.Run("ReturnWritesEachOutcome", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		cases := []struct {
			f        herald.Failure
			attempt  int
			state    heraldadmin.State
			attempts int
			lastErr  string
			parked   bool
		}{
			{herald.Failure{Outcome: herald.OutcomeRetry, Error: "refused", Delay: time.Minute}, 1,
				heraldadmin.StateReady, 1, "refused", false},
			{herald.Failure{Outcome: herald.OutcomeOutage, Error: "unreachable", Delay: 2 * time.Minute}, 1,
				heraldadmin.StateReady, 0, "unreachable", false},
			{herald.Failure{Outcome: herald.OutcomeOutage, Error: "unreachable"}, 0,
				heraldadmin.StateReady, 0, "unreachable", false}, // never below 0
			{herald.Failure{Outcome: herald.OutcomeHeldBack, Error: herald.ErrHeldBack.Error()}, 1,
				heraldadmin.StateReady, 0, "", false}, // its last error kept: none
			{herald.Failure{Outcome: herald.OutcomeReleased, Delay: time.Second}, 1,
				heraldadmin.StateReady, 0, "", false},
			{herald.Failure{Outcome: herald.OutcomeDead, Error: "permanent", Delay: time.Hour}, 1,
				heraldadmin.StateDead, 1, "permanent", false},
			{herald.Failure{Outcome: herald.OutcomeParked, Error: "out of attempts"}, 1,
				heraldadmin.StateDead, 1, "out of attempts", true},
		}
		var p herald.ReturnParams
		for i := range cases {
			env := o.streamed("t", fmt.Sprint("k", i))
			env.Attempt = cases[i].attempt
			cases[i].f.ID = env.ID
			p.Events, p.Failed = append(p.Events, env), append(p.Failed, cases[i].f)
		}
		require.Equal(t, len(cases), o.returnRows(p))
		for _, c := range cases {
			ev := o.get(c.f.ID)
			what := string(c.f.Outcome)
			require.Equal(t, c.state, ev.State, what)
			require.Equal(t, c.attempts, ev.Attempt, what)
			require.Equal(t, c.lastErr, ev.LastError, what)
			require.Equal(t, c.parked, ev.Parked, what)
			require.Nil(t, ev.LeaseUntil, what)
			if c.state == heraldadmin.StateDead {
				require.NotNil(t, ev.DeadAt, what)
				around(t, *ev.DeadAt, 0, what)
			} else {
				require.Nil(t, ev.DeadAt, what)
				around(t, ev.AvailableAt, c.f.Delay, what)
			}
		}
	})

	t.Run("ReturnKeepsSeqAndCreatedAtOfADeletedRow", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		env := o.streamed("t", "k")
		before := o.get(env.ID)
		o.exec(`DELETE FROM `+o.d.Table()+` WHERE id = $1`, env.ID)
		later := o.streamed("t", "k")

		require.Equal(t, 1, o.returnRows(herald.ReturnParams{Events: []herald.Envelope{env},
			Failed: []herald.Failure{{ID: env.ID, Outcome: herald.OutcomeRetry, Error: "refused"}}}))
		after := o.get(env.ID)
		require.Equal(t, heraldadmin.StateReady, after.State)
		require.Equal(t, before.Seq, after.Seq)
		require.Less(t, after.Seq, later.Seq)
		require.True(t, before.CreatedAt.Equal(after.CreatedAt))
		require.Equal(t, before.Message, after.Message, "the event whole")
		require.Equal(t, 1, after.Attempt)

		// The identity goes on past the seq given back.
		require.Greater(t, o.streamed("t", "k").Seq, later.Seq)
	})

	t.Run("ReturnLeavesARowThatIsNoLongerStreamed", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		env := o.streamed("t", "k")
		p := herald.ReturnParams{Events: []herald.Envelope{env},
			Failed: []herald.Failure{{ID: env.ID, Outcome: herald.OutcomeRetry, Error: "first", Delay: time.Hour}}}
		require.Equal(t, 1, o.returnRows(p))
		first := o.get(env.ID)

		// The same batch again (its confirmation was lost), and another
		// outcome: the row is the first run's.
		require.Zero(t, o.returnRows(p))
		p.Failed[0] = herald.Failure{ID: env.ID, Outcome: herald.OutcomeParked, Error: "second"}
		require.Zero(t, o.returnRows(p))
		require.Equal(t, first, o.get(env.ID))

		// An operator's published row, likewise.
		other := o.streamed("t", "k2")
		o.exec(`UPDATE `+o.d.Table()+` SET state = 'published', published_at = now() WHERE id = $1`, other.ID)
		require.Zero(t, o.returnRows(herald.ReturnParams{Events: []herald.Envelope{other},
			Failed: []herald.Failure{{ID: other.ID, Outcome: herald.OutcomeDead, Error: "no"}}}))
		require.Equal(t, heraldadmin.StatePublished, o.get(other.ID).State)
	})

	t.Run("ReturnWritesAnUnreadableRowOnlyWhileStreamed", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		unreadable := o.streamed("t", "k").ID
		ready := o.insert("t", "k2", "", "")
		missing := uuid.NewString()
		event := o.streamed("t", "k3")
		dead := func(id string) herald.Failure {
			return herald.Failure{ID: id, Outcome: herald.OutcomeDead, Error: "herald: unreadable row: header 3 is a number"}
		}
		n := o.returnRows(herald.ReturnParams{Events: []herald.Envelope{event},
			Failed: []herald.Failure{dead(unreadable), dead(ready), dead(event.ID), dead(missing)}})
		require.Equal(t, 2, n, "the unreadable streamed row and the event")

		ev := o.get(unreadable)
		require.Equal(t, heraldadmin.StateDead, ev.State)
		require.Equal(t, 1, ev.Attempt)
		require.Equal(t, dead("").Error, ev.LastError)
		require.NotNil(t, ev.DeadAt)
		require.Equal(t, heraldadmin.StateReady, o.get(ready).State)
		require.Empty(t, o.get(ready).LastError)
		_, err := o.d.GetEvent(t.Context(), missing)
		require.ErrorIs(t, err, heraldadmin.ErrNotFound, "an unreadable row is never inserted")
	})

	t.Run("ReturnRefusesWhatItCannotWriteBeforeAnySQL", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		a, b := o.streamed("t", "k"), o.streamed("t", "k")
		for what, p := range map[string]herald.ReturnParams{
			"an event without a failure": {Events: []herald.Envelope{a, b},
				Failed: []herald.Failure{{ID: a.ID, Outcome: herald.OutcomeDead}}},
			"a published outcome": {Events: []herald.Envelope{a},
				Failed: []herald.Failure{{ID: a.ID, Outcome: herald.OutcomePublished}}},
			"an id that is no UUID": {Failed: []herald.Failure{{ID: "nope", Outcome: herald.OutcomeDead}}},
		} {
			_, err := o.d.Return(t.Context(), p)
			require.Error(t, err, what)
		}
		require.Equal(t, heraldadmin.State(stateStreamed), o.get(a.ID).State)
		require.Equal(t, heraldadmin.State(stateStreamed), o.get(b.ID).State)

		n, err := o.d.Return(t.Context(), herald.ReturnParams{})
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("ReturnedEventsAreClaimedInOrderWithTheirKey", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		// The relay publishes s1 and fails it; s2 was deleted by
		// retention before it came back; r3 and r4 were written for
		// polling meanwhile.
		s1, s2 := o.streamed("t", "k"), o.streamed("t", "k")
		o.exec(`DELETE FROM `+o.d.Table()+` WHERE id = $1`, s2.ID)
		r3, r4 := o.insert("t", "k", "", ""), o.insert("t", "k", "", "")
		o.streamed("t", "k") // published from the log: never claimed

		require.Equal(t, 2, o.returnRows(herald.ReturnParams{Events: []herald.Envelope{s1, s2},
			Failed: []herald.Failure{
				{ID: s1.ID, Outcome: herald.OutcomeRetry, Error: "refused"},
				{ID: s2.ID, Outcome: herald.OutcomeHeldBack, Error: herald.ErrHeldBack.Error()},
			}}))
		claimed := o.claim(false)
		require.Equal(t, []string{s1.ID, s2.ID, r3, r4}, envIDs(claimed), "an ordered claim, by seq")
		require.Equal(t, []int{2, 1, 1, 1}, []int{claimed[0].Attempt, claimed[1].Attempt, claimed[2].Attempt, claimed[3].Attempt})
	})

	t.Run("ReturnAndKeysWaitingWorkOverDatabaseSQL", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		db := stdlib.OpenDBFromPool(o.pool)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		d, err := NewSQL(db, &Config{Schema: o.d.names.Schema})
		require.NoError(t, err)
		env, gone := o.streamed("t", "k"), o.streamed("t", "k")
		o.exec(`DELETE FROM `+o.d.Table()+` WHERE id = $1`, gone.ID)
		unreadable := o.streamed("t", "k2").ID
		n, err := d.Return(t.Context(), herald.ReturnParams{Events: []herald.Envelope{env, gone},
			Failed: []herald.Failure{
				{ID: env.ID, Outcome: herald.OutcomeRetry, Error: "refused", Delay: time.Minute},
				{ID: gone.ID, Outcome: herald.OutcomeHeldBack},
				{ID: unreadable, Outcome: herald.OutcomeDead, Error: "unreadable"},
			}})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.Equal(t, o.get(gone.ID).Message, gone.Message)
		waiting, err := d.KeysWaiting(t.Context(), []herald.TopicKey{{Topic: "t", Key: "k2"}, {Topic: "t", Key: "k"}})
		require.NoError(t, err)
		require.Equal(t, []herald.TopicKey{{Topic: "t", Key: "k"}}, waiting)
		require.NoError(t, d.StreamInserts(t.Context(), true))
		state, err := d.InsertState(t.Context())
		require.NoError(t, err)
		require.Equal(t, "streamed", state)
	})

	t.Run("ReturnWorksOnAPartitionedTable", func(t *testing.T) {
		t.Parallel()
		pool := testenv.PostgresPool(t)
		d, _ := newPartitioned(t, pool, &Partitioning{})
		o := &streamOutbox{t: t, pool: pool, d: d}
		kept, deleted := o.streamed("t", "k"), o.streamed("t", "k")
		o.exec(`DELETE FROM `+d.Table()+` WHERE id = $1`, deleted.ID)
		require.Equal(t, 2, o.returnRows(herald.ReturnParams{Events: []herald.Envelope{kept, deleted},
			Failed: []herald.Failure{
				{ID: kept.ID, Outcome: herald.OutcomeParked, Error: "refused"},
				{ID: deleted.ID, Outcome: herald.OutcomeHeldBack},
			}}))
		require.Equal(t, heraldadmin.StateDead, o.get(kept.ID).State)
		require.True(t, o.get(kept.ID).Parked)
		back := o.get(deleted.ID)
		require.Equal(t, heraldadmin.StateReady, back.State)
		require.Equal(t, deleted.Seq, back.Seq)
		require.True(t, deleted.CreatedAt.Equal(back.CreatedAt))
		require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM `+d.Table()), "one row each")
		require.Zero(t, o.returnRows(herald.ReturnParams{Events: []herald.Envelope{kept},
			Failed: []herald.Failure{{ID: kept.ID, Outcome: herald.OutcomeRetry}}}))
	})
}

func TestStreamInserts(t *testing.T) {
	t.Parallel()

	t.Run("StreamedInsertsAreNeverClaimed", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		ctx := t.Context()
		state, err := o.d.InsertState(ctx)
		require.NoError(t, err)
		require.Equal(t, "ready", state)

		for range 2 { // twice: the second finds it done
			require.NoError(t, o.d.StreamInserts(ctx, true))
			state, err = o.d.InsertState(ctx)
			require.NoError(t, err)
			require.Equal(t, "streamed", state)
		}
		var id string
		require.NoError(t, o.pool.QueryRow(ctx, `INSERT INTO `+o.d.Table()+` (topic, payload) VALUES ('t', 'x') RETURNING id::text`).Scan(&id))
		require.Equal(t, heraldadmin.State("streamed"), o.get(id).State)
		w, err := NewWriter(&Config{Schema: o.d.names.Schema})
		require.NoError(t, err)
		written := herald.Message{ID: herald.NewID(), Topic: "t", Key: "k", Payload: []byte("y")}
		require.NoError(t, pgx.BeginFunc(ctx, o.pool, func(tx pgx.Tx) error { return w.WriteTx(ctx, tx, written) }))
		require.Equal(t, heraldadmin.StateStreamed, o.get(written.ID).State)
		require.Empty(t, o.claim(false))
		require.Empty(t, o.claim(true))
		waiting, err := o.d.KeysWaiting(ctx, []herald.TopicKey{{Topic: "t", Key: "k"}})
		require.NoError(t, err)
		require.Empty(t, waiting)

		st, err := o.d.Status(ctx)
		require.NoError(t, err)
		require.Len(t, st.Topics, 1)
		require.Equal(t, heraldadmin.StateStreamed, st.Topics[0].State, "status counts streamed rows on their own")
		require.Equal(t, int64(2), st.Topics[0].Count)
		require.Zero(t, st.OldestPending, "and not as pending")

		require.NoError(t, o.d.StreamInserts(ctx, false))
		state, err = o.d.InsertState(ctx)
		require.NoError(t, err)
		require.Equal(t, "ready", state)
		ready := o.insert("t", "k", "", "")
		require.Equal(t, []string{ready}, envIDs(o.claim(false)))
	})

	t.Run("StreamInsertsNeedsTheStreamedState", func(t *testing.T) {
		t.Parallel()
		pool := testenv.PostgresPool(t)
		d, err := New(pool, &Config{Schema: testenv.Schema(t)})
		require.NoError(t, err)
		require.NoError(t, d.MigrateTo(t.Context(), streamedVersion-1))
		require.ErrorContains(t, d.StreamInserts(t.Context(), true), "herald migrate")
		state, err := d.InsertState(t.Context())
		require.NoError(t, err)
		require.Equal(t, "ready", state)
	})
}

func TestStreamedRowsRetention(t *testing.T) {
	t.Parallel()

	t.Run("RetentionDeletesOldStreamedRowsAfterPublishedOnes", func(t *testing.T) {
		t.Parallel()
		o := newStreamOutbox(t)
		var old []string
		for range 3 {
			old = append(old, o.insert("t", "", "state, created_at", "'streamed', now() - interval '2 days'"))
		}
		published := o.insert("t", "", "state, published_at", "'published', now() - interval '2 days'")
		recent := o.insert("t", "", "state, created_at", "'streamed', now() - interval '1 hour'")
		ready := o.insert("t", "", "created_at", "now() - interval '2 days'")

		for _, want := range []int{2, 2, 0} {
			n, err := o.d.DeletePublished(t.Context(), 24*time.Hour, 2)
			require.NoError(t, err)
			require.Equal(t, want, n, "limit 2 per call, 4 to delete")
		}
		for _, id := range append(old, published) {
			_, err := o.d.GetEvent(t.Context(), id)
			require.ErrorIs(t, err, heraldadmin.ErrNotFound)
		}
		o.get(recent)
		o.get(ready)
	})

	t.Run("RetentionDeletesStreamedRowsOnAPartitionedTable", func(t *testing.T) {
		t.Parallel()
		pool := testenv.PostgresPool(t)
		d, _ := newPartitioned(t, pool, &Partitioning{})
		o := &streamOutbox{t: t, pool: pool, d: d}
		// Ten days ago has no partition: the rows are in the default one,
		// which no drop takes.
		old := o.insert("t", "", "state, created_at", "'streamed', now() - interval '10 days'")
		recent := o.streamed("t", "")
		n, err := d.DeletePublished(t.Context(), 24*time.Hour, 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		_, err = d.GetEvent(t.Context(), old)
		require.ErrorIs(t, err, heraldadmin.ErrNotFound)
		o.get(recent.ID)
	})
}

// Migration 008 finds migration 001's state check by its column, on a
// plain table and on a partitioned one, whose partitions take the new
// check from their parent.
func TestMigrationAdmitsTheStreamedState(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]*Partitioning{"OnAPlainTable": nil, "OnAPartitionedTable": {}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := testenv.PostgresPool(t)
			d, err := New(pool, &Config{Schema: testenv.Schema(t), Partition: p})
			require.NoError(t, err)
			require.NoError(t, d.MigrateTo(ctx, streamedVersion-1))
			o := &streamOutbox{t: t, pool: pool, d: d}
			_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload, state) VALUES ('t', 'x', 'streamed')`)
			require.ErrorContains(t, err, `"herald_outbox_state_check"`, "before the migration")
			o.insert("t", "", "", "")

			require.NoError(t, d.Migrate(ctx))
			o.streamed("t", "")
			_, err = pool.Exec(ctx, `INSERT INTO `+d.Table()+` (topic, payload, state) VALUES ('t', 'x', 'bogus')`)
			require.ErrorContains(t, err, `violates check constraint "herald_outbox_state_check"`)
			require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM pg_constraint c
				JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attname = 'state'
				WHERE c.conrelid = $1::regclass AND c.contype = 'c' AND c.conkey = ARRAY[a.attnum]`, d.Table()),
				"one check of the state alone")
			require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM pg_indexes
				WHERE schemaname = $1 AND indexname = 'herald_outbox_streamed_idx'`, d.names.Schema))
			if p != nil {
				// Every partition has the check, under the parent's name.
				// Only this table's constraints are printed: a check of that
				// name in another test's schema may be dropped while the
				// query runs, and printing it then fails (the planner read
				// every constraint of that name, printing each, before
				// matching them to the partitions).
				require.Zero(t, count(t, pool, `WITH mine AS MATERIALIZED (
						SELECT c.oid, c.conrelid FROM pg_constraint c JOIN pg_inherits i ON i.inhrelid = c.conrelid
						WHERE i.inhparent = $1::regclass AND c.conname = 'herald_outbox_state_check')
					SELECT count(*) FROM pg_inherits i
					WHERE i.inhparent = $1::regclass AND NOT EXISTS (SELECT 1 FROM mine m
						WHERE m.conrelid = i.inhrelid AND pg_get_constraintdef(m.oid) LIKE '%streamed%')`, d.Table()))
			}
		})
	}
}
