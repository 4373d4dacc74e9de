package heraldpg_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// Config.EmitMessages, the table-less mode of a table relayed by
// change-data-capture: each writer emits its messages as transactional
// logical decoding messages in the caller's transaction. That the relay
// publishes them is heraldcdc's TestEmittedEventsArePublishedFromTheLog.

// setupEmitting migrates an outbox for cfg with EmitMessages set;
// streamed makes its inserts default to the streamed state, as
// `herald relay --source cdc` does. Its writerKinds are those of
// setupDeleting, on this config.
func setupEmitting(t *testing.T, cfg heraldpg.Config, streamed bool) deleting {
	t.Helper()
	cfg.EmitMessages = true
	return setupWriting(t, cfg, streamed)
}

func TestEmitMessages(t *testing.T) {
	t.Parallel()

	t.Run("CommittedWritesLeaveNoRow", func(t *testing.T) {
		t.Parallel()
		d := setupEmitting(t, heraldpg.Config{}, true)
		for _, k := range d.writerKinds(t) {
			for _, n := range []int{1, 50} {
				t.Run(fmt.Sprintf("%s/%d", k.name, n), func(t *testing.T) {
					tx := k.begin(t)
					require.Equal(t, [2]int64{0, 0}, tx.written(t, messages(n)...), "inserted, deleted")
					require.NoError(t, tx.commit())
					require.Empty(t, d.Counts())
				})
			}
		}
	})

	t.Run("CommittedWritesLeaveNoRowInAPartitionedTable", func(t *testing.T) {
		t.Parallel()
		d := setupEmitting(t, heraldpg.Config{Partition: &heraldpg.Partitioning{}}, true)
		for _, k := range d.writerKinds(t) {
			t.Run(k.name, func(t *testing.T) {
				tx := k.begin(t)
				require.Equal(t, [2]int64{0, 0}, tx.written(t, messages(1)...))
				require.Equal(t, [2]int64{0, 0}, tx.written(t, messages(20)...))
				require.NoError(t, tx.commit())
				require.Empty(t, d.Counts())
			})
		}
	})

	// While the table's inserts default to ready, nothing reads the
	// messages: the writers insert rows, for the claims.
	t.Run("ReadyInsertsAreRowsForTheClaims", func(t *testing.T) {
		t.Parallel()
		d := setupEmitting(t, heraldpg.Config{}, false)
		for _, k := range d.writerKinds(t) {
			tx := k.begin(t)
			require.Equal(t, [2]int64{1, 0}, tx.written(t, messages(1)...), k.name)
			require.Equal(t, [2]int64{4, 0}, tx.written(t, messages(4)...), k.name)
			require.NoError(t, tx.commit(), k.name)
		}
		require.Equal(t, map[string]int64{"orders/ready": 15}, d.Counts())
		// In the order given: the seqs of one WriteTx follow it.
		rows, err := d.Pool.Query(context.Background(), `SELECT convert_from(payload, 'UTF8') FROM `+d.Store.Table()+` ORDER BY seq`)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		var want []string
		for range 3 {
			for _, n := range []int{1, 4} {
				for _, m := range messages(n) {
					want = append(want, string(m.Payload))
				}
			}
		}
		require.Equal(t, want, got)
	})

	// The rows the fallback inserts hold what an insert's would: every
	// field, read back from the JSON the writer encodes.
	t.Run("ReadyInsertsKeepEveryField", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		d := setupEmitting(t, heraldpg.Config{}, false)
		plainCfg := *d.Config
		plainCfg.EmitMessages = false
		plain, err := heraldpg.NewWriter(&plainCfg)
		require.NoError(t, err)
		full := herald.Message{Topic: "orders", Key: "k\u00e9<&>", Type: "order.placed", AggregateType: "order",
			AggregateID: "42", EventVersion: 3, AggregateVersion: 7,
			Headers:     map[string]string{"X-Tenant": "acme", "X-Quote": `"\`},
			AvailableAt: time.Date(2031, 2, 3, 4, 5, 6, 789000, time.UTC), Payload: []byte{0, 1, 2, 0xff, '"'}}
		bare := herald.Message{Topic: "orders", Payload: nil}
		var ids [2][2]string
		for i, m := range []herald.Message{full, bare} {
			for j, w := range []*herald.Writer[pgx.Tx]{d.Writer, plain} {
				m.ID = herald.NewID()
				ids[i][j] = m.ID
				require.NoError(t, pgx.BeginFunc(ctx, d.Pool, func(tx pgx.Tx) error { return w.WriteTx(ctx, tx, m) }))
			}
		}
		row := func(id string) []any {
			var (
				topic, key, typ, aggType, aggID, headers, state string
				payload                                         []byte
				available                                       time.Time
				version                                         int
				aggVersion                                      *int64
			)
			require.NoError(t, d.Pool.QueryRow(ctx, `SELECT topic, key, type, aggregate_type, aggregate_id, headers::text,
				state, payload, available_at, event_version, aggregate_version FROM `+d.Store.Table()+` WHERE id = $1`, id).
				Scan(&topic, &key, &typ, &aggType, &aggID, &headers, &state, &payload, &available, &version, &aggVersion))
			if available.After(time.Now().Add(time.Hour)) {
				return []any{topic, key, typ, aggType, aggID, headers, state, payload, available.UTC(), version, aggVersion}
			}
			// Not delayed: now() of its own transaction.
			return []any{topic, key, typ, aggType, aggID, headers, state, payload, "now", version, aggVersion}
		}
		for i := range ids {
			require.Equal(t, row(ids[i][1]), row(ids[i][0]), "message %d: the emitting writer's row, then the inserting one's", i)
		}
		require.Equal(t, full.AvailableAt, row(ids[0][0])[8])
	})

	// The statement names the table, so it holds the table's lock to the
	// end of the producer's transaction: the switch back to polling waits
	// for that transaction, which therefore commits before the switch,
	// where the relay still reads. The lock is taken from a cached generic
	// plan too, whose subquery of the table reads nothing.
	t.Run("TheSwitchToPollingWaitsForAnEmittingTransaction", func(t *testing.T) {
		t.Parallel()
		d := setupEmitting(t, heraldpg.Config{}, true)
		ctx := context.Background()
		c, err := d.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		_, err = c.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
		require.NoError(t, err)
		defer func() { _, _ = c.Exec(ctx, `RESET plan_cache_mode`) }()
		for range 6 {
			require.NoError(t, pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
				return d.Writer.WriteTx(ctx, tx, messages(1)...)
			}))
		}
		tx, err := c.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		require.NoError(t, d.Writer.WriteTx(ctx, tx, messages(1)...))
		var locks []string
		require.NoError(t, pgx.BeginFunc(ctx, d.Pool, func(other pgx.Tx) error {
			rows, err := other.Query(ctx, `SELECT mode FROM pg_locks
				WHERE locktype = 'relation' AND relation = $1::regclass AND pid = $2 AND granted`,
				d.Store.Table(), c.Conn().PgConn().PID())
			if err != nil {
				return err
			}
			locks, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		}))
		require.Equal(t, []string{"AccessShareLock"}, locks, "the producer's locks on the table")
		switched := make(chan error, 1)
		go func() { switched <- d.Store.StreamInserts(ctx, false) }()
		select {
		case err := <-switched:
			t.Fatalf("the switch did not wait for the transaction: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, <-switched)
		state, err := d.Store.InsertState(ctx)
		require.NoError(t, err)
		require.Equal(t, "ready", state)
	})

	t.Run("PgxSendsOneStatement", func(t *testing.T) {
		t.Parallel()
		d := setupEmitting(t, heraldpg.Config{}, true)
		require.Equal(t, [][2]int64{{1, 0}, {1, 0}}, pgxRoundTrips(t, d, 1, 100),
			"1 and 100 messages: statements, batches")
		require.Empty(t, d.Counts())
	})

	t.Run("ExcludesDeleteAfterInsert", func(t *testing.T) {
		t.Parallel()
		cfg := &heraldpg.Config{EmitMessages: true, DeleteAfterInsert: true}
		err := cfg.Validate()
		require.ErrorContains(t, err, "Config.EmitMessages")
		require.ErrorContains(t, err, "Config.DeleteAfterInsert")
		_, err = heraldpg.NewWriter(cfg)
		require.ErrorContains(t, err, "exclude each other")
		_, err = heraldpg.NewSQLWriter(cfg)
		require.ErrorContains(t, err, "exclude each other")
		_, err = heraldpg.NewExecWriter(cfg)
		require.ErrorContains(t, err, "exclude each other")
		require.NoError(t, (&heraldpg.Config{EmitMessages: true}).Validate())
	})
}

// emitted is a message's content as the writers emit it.
type emitted struct {
	ID               string            `json:"id"`
	Seq              int64             `json:"seq"`
	Topic            string            `json:"topic"`
	Key              string            `json:"key"`
	Type             string            `json:"type"`
	AggregateType    string            `json:"aggregate_type"`
	AggregateID      string            `json:"aggregate_id"`
	Payload          string            `json:"payload"`
	Headers          map[string]string `json:"headers"`
	EventVersion     int               `json:"event_version"`
	AggregateVersion *int64            `json:"aggregate_version"`
	CreatedAt        time.Time         `json:"created_at"`
	AvailableAt      *time.Time        `json:"available_at"`
}

// The messages as logical decoding reads them, from a temporary slot of
// the writers' connection's database: in the order given, with the
// transaction that committed, never with one that rolled back.
func TestEmitMessagesKeepTheOrderGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := setupEmitting(t, heraldpg.Config{}, true)
	conn, err := d.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var level string
	require.NoError(t, conn.QueryRow(ctx, `SHOW wal_level`).Scan(&level))
	if level != "logical" {
		t.Skipf("wal_level is %s, not logical: heraldcdc's TestEmittedEventsArePublishedFromTheLog reads the messages instead", level)
	}
	// A temporary slot is this connection's and goes with it; the
	// publication only has to exist for pgoutput (messages belong to
	// none).
	name := d.Config.Schema
	_, err = conn.Exec(ctx, `CREATE PUBLICATION `+name+` FOR TABLE `+d.Store.Table())
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = d.Pool.Exec(context.Background(), `DROP PUBLICATION IF EXISTS `+name) })
	_, err = conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput', true)`, name)
	require.NoError(t, err)

	write := func(commit bool, msgs ...herald.Message) {
		t.Helper()
		tx, err := d.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// Logical decoding reads flushed WAL only, and the test cluster
		// does not wait for the flush unless asked.
		_, err = tx.Exec(ctx, `SET LOCAL synchronous_commit = on`)
		require.NoError(t, err)
		require.NoError(t, d.Writer.WriteTx(ctx, tx, msgs...))
		if commit {
			require.NoError(t, tx.Commit(ctx))
		}
	}
	versioned := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "k", Type: "order.placed", AggregateType: "order",
		AggregateID: "42", EventVersion: 3, AggregateVersion: 7, Headers: map[string]string{"X-Tenant": "acme"},
		Payload: []byte{0, 1, 2, 0xff}, AvailableAt: time.Date(2031, 2, 3, 4, 5, 6, 789000, time.UTC)}
	many := messages(300)
	for i := range many {
		many[i].ID = herald.NewID()
	}
	rolledBack := herald.Message{ID: herald.NewID(), Topic: "orders", Key: "k", Payload: []byte("never")}
	write(true, versioned)
	write(false, rolledBack)
	write(true, many...)

	rows, err := conn.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2, 'messages', 'true')`, name, name)
	require.NoError(t, err)
	data, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	require.NoError(t, err)
	var (
		got   []emitted
		inTxn bool
	)
	prefix := "herald.event:" + d.Config.Schema + ".herald_outbox"
	for _, raw := range data {
		msg, err := pglogrepl.Parse(raw)
		require.NoError(t, err)
		switch m := msg.(type) {
		case *pglogrepl.BeginMessage:
			inTxn = true
		case *pglogrepl.CommitMessage:
			inTxn = false
		case *pglogrepl.InsertMessage:
			t.Fatalf("a row was inserted into relation %d", m.RelationID)
		case *pglogrepl.LogicalDecodingMessage:
			if m.Prefix != prefix {
				continue // another test's
			}
			require.True(t, m.Transactional && inTxn, "a transactional message, inside its transaction")
			var e emitted
			require.NoError(t, json.Unmarshal(m.Content, &e), string(m.Content))
			got = append(got, e)
		}
	}
	require.Len(t, got, 1+len(many), "the rolled-back message is never decoded")
	first := got[0]
	require.WithinDuration(t, time.Now(), first.CreatedAt, time.Minute, "created_at by the database clock")
	payload, err := base64.StdEncoding.DecodeString(first.Payload)
	require.NoError(t, err)
	require.Equal(t, versioned.Payload, payload)
	require.Positive(t, first.Seq)
	require.NotNil(t, first.AvailableAt)
	require.True(t, versioned.AvailableAt.Equal(*first.AvailableAt), "available_at: %v", *first.AvailableAt)
	first.CreatedAt, first.Payload, first.Seq, first.AvailableAt = time.Time{}, "", 0, nil
	seven := int64(7)
	require.Equal(t, emitted{ID: versioned.ID, Topic: "orders", Key: "k", Type: "order.placed", AggregateType: "order",
		AggregateID: "42", Headers: map[string]string{"X-Tenant": "acme"}, EventVersion: 3, AggregateVersion: &seven}, first)
	for i, e := range got[1:] {
		require.Equal(t, many[i].ID, e.ID, "message %d in the order given", i)
		require.Greater(t, e.Seq, got[i].Seq, "seqs follow the order given")
		// The columns' defaults are left out: fewer bytes of WAL.
		require.Zero(t, e.EventVersion, "event_version 1")
		require.Nil(t, e.AggregateVersion, "no aggregate_version")
		require.Nil(t, e.Headers, "no headers")
		require.Nil(t, e.AvailableAt, "no available_at")
		require.Empty(t, e.Type+e.AggregateType+e.AggregateID)
		require.Equal(t, many[i].Key, e.Key)
	}
}

// An event read from a logical decoding message written without a seq
// (plain SQL) has Seq 0: Return gives it a fresh seq from the table's
// sequence, and every later event of its key in the call too, so that the
// key's events are claimed in the order the relay wrote them back. An
// event with a seq keeps it.
func TestReturnGivesAnEventWithoutASeqAFreshOne(t *testing.T) {
	t.Parallel()
	t.Run("Plain", func(t *testing.T) {
		t.Parallel()
		testReturnGivesAnEventWithoutASeqAFreshOne(t, heraldpg.Config{})
	})
	t.Run("Partitioned", func(t *testing.T) {
		t.Parallel()
		testReturnGivesAnEventWithoutASeqAFreshOne(t, heraldpg.Config{Partition: &heraldpg.Partitioning{}})
	})
}

func testReturnGivesAnEventWithoutASeqAFreshOne(t *testing.T, cfg heraldpg.Config) {
	ctx := context.Background()
	o := pgtest.New(t, testenv.PostgresPool(t), cfg)
	require.NoError(t, o.Store.StreamInserts(ctx, true))
	row := func(key string) herald.Envelope {
		t.Helper()
		var id string
		require.NoError(t, o.Pool.QueryRow(ctx, `INSERT INTO `+o.Store.Table()+` (topic, key, payload) VALUES ('t', $1, 'row')
			RETURNING id::text`, key).Scan(&id))
		ev, err := o.Store.GetEvent(ctx, id)
		require.NoError(t, err)
		env := ev.Envelope
		env.Attempt = 1
		return env
	}
	message := func(key string) herald.Envelope {
		return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: "t", Key: key, Payload: []byte("message"),
			EventVersion: 1}, Attempt: 1, CreatedAt: time.Now()}
	}
	// Rows allocated their seqs before the messages' fresh ones: r1
	// committed after m1 (a row of k written while m1 waited), r2 of
	// another key keeps its seq.
	r1, r2 := row("k"), row("j")
	m1, m2 := message("k"), message("k")
	events := []herald.Envelope{m1, r1, r2, m2}
	var failed []herald.Failure
	for _, e := range events {
		failed = append(failed, herald.Failure{ID: e.ID, Outcome: herald.OutcomeRetry, Error: "refused"})
	}
	n, err := o.Store.Return(ctx, herald.ReturnParams{Events: events, Failed: failed})
	require.NoError(t, err)
	require.Equal(t, 4, n)

	claimed, err := o.Store.Claim(ctx, herald.ClaimParams{Token: herald.NewID(), Owner: "test", Limit: 10, Lease: time.Minute})
	require.NoError(t, err)
	var k []string
	seqs := map[string]int64{}
	for _, e := range claimed {
		seqs[e.ID] = e.Seq
		if e.Key == "k" {
			k = append(k, e.ID)
		}
	}
	require.Equal(t, []string{m1.ID, r1.ID, m2.ID}, k, "key k in the order written back")
	require.Greater(t, seqs[m1.ID], r2.Seq, "a fresh seq, above those given out before")
	require.Equal(t, r2.Seq, seqs[r2.ID], "an event of another key keeps its seq")
}
