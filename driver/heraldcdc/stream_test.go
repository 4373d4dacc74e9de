package heraldcdc_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	dsn  string
	pool *pgxpool.Pool
	pc   *testenv.Cluster
}

// setup starts a private cluster (wal_level=logical) with a migrated
// outbox as a relay with a Source leaves it: the publication and the slot
// herald_outbox made (no stream reads it), then the inserts defaulting to
// the streamed state, so that the stream hands out only streamed rows.
func setup(t *testing.T) fixture {
	t.Helper()
	f := setupPolled(t)
	require.NoError(t, f.open(t, true).Close())
	f.awaitSlotIdle(t)
	store, err := heraldpg.New(f.pool, &heraldpg.Config{})
	require.NoError(t, err)
	require.NoError(t, store.StreamInserts(context.Background(), true))
	return f
}

// setupPolled starts a private cluster (wal_level=logical) with a
// migrated outbox as polling relays use it: inserts ready, no publication
// and no slot.
func setupPolled(t *testing.T) fixture {
	t.Helper()
	pc := testenv.PrivateCluster(t)
	pool, err := pgxpool.New(context.Background(), pc.DSN)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	store, err := heraldpg.New(pool, &heraldpg.Config{})
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	return fixture{dsn: pc.DSN, pool: pool, pc: pc}
}

// insert commits one transaction of rows (topic, key, payload) and
// returns their ids.
func (f fixture) insert(t *testing.T, rows ...[3]string) []string {
	t.Helper()
	tx, err := f.pool.Begin(context.Background())
	require.NoError(t, err)
	ids := insertIn(t, tx, rows...)
	require.NoError(t, tx.Commit(context.Background()))
	return ids
}

func insertIn(t *testing.T, tx pgx.Tx, rows ...[3]string) []string {
	t.Helper()
	var ids []string
	for _, r := range rows {
		var id string
		require.NoError(t, tx.QueryRow(context.Background(),
			`INSERT INTO herald_outbox (topic, key, payload, headers) VALUES ($1, $2, $3, '{"X-Tenant":"acme"}') RETURNING id::text`,
			r[0], r[1], []byte(r[2])).Scan(&id))
		ids = append(ids, id)
	}
	return ids
}

func (f fixture) open(t *testing.T, create bool) *heraldcdc.Stream {
	t.Helper()
	s, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, CreateSlot: create, StatusInterval: time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	return s
}

// next reads the stream's next transaction whole: its parts put
// together.
func next(t *testing.T, s *heraldcdc.Stream) heraldcdc.Transaction {
	t.Helper()
	tx := nextPart(t, s)
	require.Zero(t, tx.Part, "a transaction's first part")
	for n := 1; tx.End == 0; n++ {
		part := nextPart(t, s)
		require.Equal(t, n, part.Part)
		require.Equal(t, tx.Commit, part.Commit)
		tx.Events = append(tx.Events, part.Events...)
		tx.Unreadable = append(tx.Unreadable, part.Unreadable...)
		tx.Polled = append(tx.Polled, part.Polled...)
		tx.End, tx.Part = part.End, part.Part
	}
	return tx
}

// nextPart reads the stream's next part of a transaction.
func nextPart(t *testing.T, s *heraldcdc.Stream) heraldcdc.Transaction {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tx, err := s.Next(ctx)
	require.NoError(t, err)
	return tx
}

func ids(tx heraldcdc.Transaction) []string {
	var out []string
	for _, e := range tx.Events {
		out = append(out, e.ID)
	}
	return out
}

// slotConfirmed reads the slot's confirmed_flush_lsn.
func (f fixture) slotConfirmed(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'herald_outbox'`).Scan(&s))
	lsn, err := pglogrepl.ParseLSN(s)
	require.NoError(t, err)
	return lsn
}

// Transactions come in commit order, whatever order they began and wrote
// in; a rolled-back one never comes; the slot's confirmed position only
// moves where Confirm says, and a new stream starts there.
func TestStreamDeliversCommitOrderAndResumesFromTheConfirmedPosition(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	s := f.open(t, true)
	start := f.slotConfirmed(t)

	first := f.insert(t, [3]string{"orders", "a", "1"}, [3]string{"orders", "a", "2"})
	// Two transactions interleaved: the one that began first commits last.
	early, err := f.pool.Begin(context.Background())
	require.NoError(t, err)
	lateIDs := insertIn(t, early, [3]string{"orders", "b", "late"})
	rolled, err := f.pool.Begin(context.Background())
	require.NoError(t, err)
	insertIn(t, rolled, [3]string{"orders", "c", "never"})
	second := f.insert(t, [3]string{"orders", "b", "early"})
	require.NoError(t, rolled.Rollback(context.Background()))
	require.NoError(t, early.Commit(context.Background()))

	tx1 := next(t, s)
	require.Equal(t, first, ids(tx1))
	require.Equal(t, []byte("1"), tx1.Events[0].Payload)
	require.Equal(t, "a", tx1.Events[0].Key)
	require.Equal(t, map[string]string{"X-Tenant": "acme"}, tx1.Events[0].Headers)
	require.WithinDuration(t, time.Now(), tx1.Events[0].CreatedAt, time.Minute)
	require.Equal(t, 1, tx1.Events[0].Attempt)
	require.Equal(t, 1, tx1.Events[0].EventVersion, "a row without versions is event version 1")
	require.Zero(t, tx1.Events[0].AggregateVersion)
	tx2 := next(t, s)
	require.Equal(t, second, ids(tx2), "commit order, not begin order")
	tx3 := next(t, s)
	require.Equal(t, lateIDs, ids(tx3))
	require.Less(t, tx1.End, tx2.End)
	require.Less(t, tx2.End, tx3.End)

	// Nothing confirmed yet: the slot stays where it was.
	require.Equal(t, start, f.slotConfirmed(t))
	s.Confirm(tx1.End)
	require.Eventually(t, func() bool { return f.slotConfirmed(t) == tx1.End }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, s.Close())
	require.Equal(t, tx1.End, f.slotConfirmed(t), "closing confirms nothing more")

	// A new stream redelivers what was not confirmed, and only that.
	s = f.open(t, false)
	defer s.Close()
	require.Equal(t, tx1.End, s.Start())
	require.Equal(t, second, ids(next(t, s)))
	require.Equal(t, lateIDs, ids(next(t, s)))

	// A row other programs wrote that is no event does not stop the stream.
	var bad string
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`INSERT INTO herald_outbox (topic, payload, headers) VALUES ('orders', 'x', '{"n": 1}') RETURNING id::text`).Scan(&bad))
	good := f.insert(t, [3]string{"orders", "d", "after"})
	tx := next(t, s)
	require.Equal(t, []string{bad}, ids(tx))
	require.Empty(t, tx.Unreadable)
	requireRefused(t, tx.Events[0], "headers")
	require.Equal(t, good, ids(next(t, s)))

	// The versions' columns come through the WAL as they were written.
	var versioned string
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`INSERT INTO herald_outbox (topic, payload, event_version, aggregate_version) VALUES ('orders', 'v', 4, 8) RETURNING id::text`).Scan(&versioned))
	tx = next(t, s)
	require.Equal(t, []string{versioned}, ids(tx))
	require.Equal(t, 4, tx.Events[0].EventVersion)
	require.Equal(t, int64(8), tx.Events[0].AggregateVersion)

	// Rows in another state than streamed are the polling path's, even
	// unreadable ones: their ids come apart from the events.
	var ready, readyBad string
	require.NoError(t, f.pool.QueryRow(context.Background(), `WITH r AS (
		INSERT INTO herald_outbox (topic, payload, state) VALUES ('orders', 'r', 'ready') RETURNING id::text),
		b AS (INSERT INTO herald_outbox (topic, payload, state, headers) VALUES ('orders', 'b', 'dead', '{"n": 1}') RETURNING id::text)
		SELECT (SELECT id FROM r), (SELECT id FROM b)`).Scan(&ready, &readyBad))
	streamed := f.insert(t, [3]string{"orders", "e", "streamed"})
	tx = next(t, s)
	require.Empty(t, tx.Events)
	require.Empty(t, tx.Unreadable)
	require.ElementsMatch(t, []string{ready, readyBad}, tx.Polled)
	require.Equal(t, streamed, ids(next(t, s)))
}

func TestStreamRefusesAMissingSlot(t *testing.T) {
	t.Parallel()
	f := setupPolled(t)
	_, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn})
	require.ErrorContains(t, err, "publication herald_outbox does not exist")
	_, err = f.pool.Exec(context.Background(), `CREATE PUBLICATION herald_outbox FOR TABLE herald_outbox WITH (publish = 'insert')`)
	require.NoError(t, err)
	_, err = heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn})
	require.ErrorContains(t, err, "replication slot herald_outbox does not exist")
	require.ErrorContains(t, err, "skip what was committed", "the error says why it does not simply make one")
	_, err = heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, Slot: "Bad-Name"})
	require.ErrorContains(t, err, "Config.Slot")
}

// dropSlot drops the slot once the walsender of a closed stream ended.
func (f fixture) dropSlot(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		_, err := f.pool.Exec(context.Background(), `SELECT pg_drop_replication_slot('herald_outbox')`)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)
}

// A slot Herald read from and that was dropped, or dropped and created
// again, while no stream read it is refused with the way to recover:
// what committed in between was never read from it, and starting anyway
// would skip it silently. The record that tells is the furthest position
// Herald let the slot confirm (heraldpg's migration 009).
func TestStreamRefusesASlotDroppedBehindItsBack(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	s := f.open(t, true)
	f.insert(t, [3]string{"orders", "k", "a"})
	tx := next(t, s)
	s.Confirm(tx.End)
	require.Eventually(t, func() bool { return f.slotConfirmed(t) >= tx.End }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, s.Close())

	// Nothing happened to the slot: a new stream starts where it was.
	s = f.open(t, false)
	require.NoError(t, s.Close())

	f.dropSlot(t)
	f.insert(t, [3]string{"orders", "k", "committed while no slot existed"})
	for _, create := range []bool{false, true} {
		_, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, CreateSlot: create})
		require.ErrorContains(t, err, "replication slot herald_outbox does not exist, but Herald read from it up to")
		require.ErrorContains(t, err, "herald source poll --cdc-slot herald_outbox --requeue-since ",
			"the error gives the recovery, and CreateSlot does not make a new slot over the gap (create %v)", create)
	}

	_, err := f.pool.Exec(context.Background(), `SELECT pg_create_logical_replication_slot('herald_outbox', 'pgoutput')`)
	require.NoError(t, err)
	_, err = heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn})
	require.ErrorContains(t, err, "it was dropped and created again while no relay read it")
	require.ErrorContains(t, err, "--requeue-since ")

	// The recovery forgets the record: the slot as it stands is taken.
	d, err := heraldpg.New(f.pool, nil)
	require.NoError(t, err)
	forgot, err := d.ForgetSlot(context.Background(), "herald_outbox")
	require.NoError(t, err)
	require.True(t, forgot)
	s = f.open(t, false)
	require.NoError(t, s.Close())
}

// A transaction larger than a part comes in parts, each with the commit's
// position and time, only the last with the end to confirm; the stream
// counts it handed out from its first part, so a heartbeat does not pass
// it before its end is confirmed.
func TestStreamHandsOutALargeTransactionInParts(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	s, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, CreateSlot: true, StatusInterval: 100 * time.Millisecond,
		HeartbeatInterval: 20 * time.Millisecond, PartRows: 100, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer s.Close()
	before := f.insert(t, [3]string{"orders", "a", "before"})
	big := f.insertMany(t, 250, "b")
	f.busy(t, 5)
	f.beatNow(t) // between the big transaction and the marker
	marker := f.insert(t, [3]string{"orders", "c", "marker"})

	first := next(t, s)
	require.Equal(t, before, ids(first))
	s.Confirm(first.End)
	var got []string
	var parts []heraldcdc.Transaction
	for len(got) < len(big) {
		p := nextPart(t, s)
		parts = append(parts, p)
		got = append(got, ids(p)...)
		if len(parts) == 1 {
			oldest, pending := s.OldestUnconfirmed()
			require.True(t, pending, "a transaction partly handed out is unconfirmed")
			require.Equal(t, p.CommitTime, oldest)
		}
	}
	require.Equal(t, big, got)
	require.Len(t, parts, 3)
	for i, p := range parts {
		require.Equal(t, i, p.Part)
		require.Len(t, p.Events, []int{100, 100, 50}[i])
		require.Equal(t, parts[0].Commit, p.Commit)
		require.True(t, parts[0].CommitTime.Equal(p.CommitTime))
		require.Greater(t, p.Commit, first.End)
		if i < 2 {
			require.Zero(t, p.End)
		}
	}
	end := parts[2].End
	require.Greater(t, end, parts[2].Commit)

	last := next(t, s)
	require.Equal(t, marker, ids(last))
	require.Less(t, s.Confirmed(), end, "the heartbeat after the big transaction was dropped")
	s.Confirm(end)
	s.Confirm(last.End)
	f.busy(t, 5)
	after := f.currentLSN(t)
	require.Eventually(t, func() bool { return f.slotConfirmed(t) > after }, 20*time.Second, 20*time.Millisecond,
		"once confirmed, heartbeats move the slot again")
	_, pending := s.OldestUnconfirmed()
	require.False(t, pending)
}

// A Close while PostgreSQL is blocked sending to the stream (the reader
// fell behind: its buffer is full, and the socket's) still moves the slot
// to the position confirmed last. The walsender, waiting for the socket,
// tries its pending output before it reads the reader's messages: a
// connection cut as soon as the last status update is written would fail
// that write and end the walsender with the update unread, and the next
// reader would deliver again what was confirmed.
func TestCloseConfirmsWhilePostgreSQLIsBlockedSending(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	f := setup(t)
	s, err := heraldcdc.Open(context.Background(), heraldcdc.Config{ConnString: f.dsn, StatusInterval: time.Hour, HeartbeatInterval: -1,
		BufferBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	f.insertMany(t, 3, "a")
	first := next(t, s)
	require.NotZero(t, first.End)
	for range 40 {
		_, err := f.pool.Exec(context.Background(), `INSERT INTO herald_outbox (topic, key, payload)
			SELECT 'orders', 'b', convert_to(repeat('x', 2000), 'UTF8') FROM generate_series(1, 500)`)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity a
			JOIN pg_replication_slots s ON s.active_pid = a.pid
			WHERE s.slot_name = 'herald_outbox' AND a.wait_event = 'WalSenderWriteData')`).Scan(&waiting))
		return waiting
	}, 20*time.Second, 10*time.Millisecond, "the walsender waits for the stream to read")
	s.Confirm(first.End)
	require.NoError(t, s.Close())
	f.awaitSlotIdle(t)
	require.Equal(t, first.End, f.slotConfirmed(t))
}
