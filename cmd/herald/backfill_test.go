package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// backfillWorld is an outbox and a table items(id, version) of rows rows
// in a schema of the test's own.
type backfillWorld struct {
	dsn, schema string
	pool        *pgxpool.Pool
	driver      *heraldpg.Driver
	rows        int
}

func newBackfillWorld(t *testing.T, rows int) *backfillWorld {
	t.Helper()
	w := &backfillWorld{dsn: testenv.PostgresDSN(t), schema: testenv.Schema(t), pool: testenv.PostgresPool(t), rows: rows}
	r := cli(t, nil, "migrate", "--db", w.dsn, "--schema", w.schema)
	require.Equal(t, 0, r.code, r)
	var err error
	w.driver, err = heraldpg.New(w.pool, &heraldpg.Config{Schema: w.schema})
	require.NoError(t, err)
	_, err = w.pool.Exec(context.Background(), fmt.Sprintf(`CREATE TABLE %q.items (id bigint PRIMARY KEY, version int NOT NULL);
		INSERT INTO %q.items SELECT g, 1 FROM generate_series(1, %d) g; ANALYZE %q.items`, w.schema, w.schema, rows, w.schema))
	require.NoError(t, err)
	return w
}

func (w *backfillWorld) args(extra ...string) []string {
	return append([]string{"backfill", "--db", w.dsn, "--schema", w.schema, "--name", "items-e2e", "--topic", "items",
		"--from", w.schema + ".items", "--key-columns", "id", "--payload", "jsonb_build_object('version', version)"}, extra...)
}

// rowsDone reads the backfill's recorded progress.
func (w *backfillWorld) rowsDone(t *testing.T) (int64, bool) {
	var (
		n    int64
		done bool
	)
	err := w.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT rows_done, done FROM %q.herald_outbox_backfills WHERE name = 'items-e2e'`,
		w.schema)).Scan(&n, &done)
	var pgErr *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || (errors.As(err, &pgErr) && pgErr.Code == "42P01") {
		return 0, false // no record yet: the first backfill makes the table
	}
	require.NoError(t, err)
	return n, done
}

func TestBackfillCommandDryRunAndErrors(t *testing.T) {
	t.Parallel()
	w := newBackfillWorld(t, 25)
	r := cli(t, nil, w.args("--dry-run", "--batch-size", "10")...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "dry run: backfill items-e2e would write 25 events to topic items from "+w.schema+".items, from the first row, in batches of 10; nothing written")
	n, err := w.driver.ReadyBacklog(context.Background(), 100)
	require.NoError(t, err)
	require.Zero(t, n, "a dry run writes nothing")

	r = cli(t, nil, w.args("--batch-size", "10")...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "backfill items-e2e done: 25 rows (25 this run) in 3 batches")
	require.Contains(t, r.stderr, "backfill progress")
	r = cli(t, nil, w.args()...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "backfill items-e2e was done already: 25 rows")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"backfill", "--db", w.dsn, "--topic", "t", "--from", "items", "--key-columns", "id"}, "--name is required"},
		{[]string{"backfill", "--db", w.dsn, "--name", "n", "--topic", "t", "--key-columns", "id"}, "--from TABLE or --query"},
		{[]string{"backfill", "--db", w.dsn, "--name", "n", "--topic", "t", "--from", "items"}, "--key-columns is required"},
		{[]string{"backfill", "--db", w.dsn, "--name", "n", "--topic", "t", "--from", "items;x", "--key-columns", "id"}, "--from \"items;x\" is not a table name"},
		{[]string{"backfill", "--db", "sqlite:" + t.TempDir() + "/x.db", "--name", "n", "--topic", "t", "--from", "items", "--key-columns", "id"}, "does not exist"},
	} {
		r := cli(t, nil, c.args...)
		require.Equal(t, exitUsage, r.code, r)
		require.Contains(t, r.stderr, c.want)
	}
	r = cli(t, nil, w.args("--topic", "other")...)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "--restart")
}

// published is one event as the test's publisher saw it.
type published struct {
	id       string
	key      string
	version  int
	backfill bool
	at       time.Time
}

// TestBackfillBesideLiveWritesKilledTwice runs `herald backfill` as a
// process over a table while producers keep changing its rows and
// writing their events, and a relay publishes everything. The backfill
// is SIGKILLed twice and resumed. Then: every row has exactly one
// backfilled event, published; in each key's publish order no backfilled
// state is older than a live event before it, and the last event is the
// row's state; the live commit-to-publish p99 with the backfill running
// (--max-backlog at the relay's batch size) is compared with the p99
// before and between its runs, once the relay has drained what it left
// (logged; asserted within 2x
// only with HERALD_BACKFILL_CHECK_P99=1, a measurement run, never under
// -race). HERALD_BACKFILL_ROWS sets the table's size (20,000 by default).
func TestBackfillBesideLiveWritesKilledTwice(t *testing.T) {
	testenv.Long(t)
	rows := 20000
	if s := os.Getenv("HERALD_BACKFILL_ROWS"); s != "" {
		var err error
		rows, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	w := newBackfillWorld(t, rows)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The relay, in this process, publishing to a recorder.
	var (
		mu  sync.Mutex
		got []published
	)
	var relayLog testenv.LogBuffer
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: w.driver, BatchSize: 500,
		Logger: slog.New(slog.NewTextHandler(&relayLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Publisher: herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, e := range batch {
				var p struct{ Version int }
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					return err
				}
				got = append(got, published{id: e.ID, key: e.Key, version: p.Version, backfill: e.Headers[herald.HeaderBackfill] != "", at: now})
			}
			return nil
		})})
	require.NoError(t, err)
	require.NoError(t, relay.Start(ctx))
	defer func() { require.NoError(t, relay.Stop(context.Background())) }()

	// Producers: each transaction changes a random row and writes its
	// event, 400 a second in all. commits maps an event's key and version
	// to when its commit returned, and whether a backfill ran then.
	writer, err := heraldpg.NewWriter(&heraldpg.Config{Schema: w.schema})
	require.NoError(t, err)
	type commit struct {
		at      time.Time
		beside  bool
		version int
	}
	var (
		cmu           sync.Mutex
		commits       = map[string]commit{} // key/version
		backfills     sync.Map              // "running" -> bool
		wg            sync.WaitGroup
		stopProducers = make(chan struct{})
	)
	backfills.Store("running", false)
	produce := func(seed uint64) {
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(seed, 1))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopProducers:
				return
			case <-tick.C:
			}
			id := 1 + rnd.IntN(rows)
			var v int
			// Each transaction runs to its end, so that once the producers
			// have stopped no commit is still under way when the test
			// counts the outbox.
			tctx := context.Background()
			err := pgx.BeginFunc(tctx, w.pool, func(tx pgx.Tx) error {
				if err := tx.QueryRow(tctx, fmt.Sprintf(`UPDATE %q.items SET version = version + 1 WHERE id = $1 RETURNING version`, w.schema),
					id).Scan(&v); err != nil {
					return err
				}
				return writer.WriteTx(tctx, tx, herald.Message{Topic: "items", Key: strconv.Itoa(id), Payload: fmt.Appendf(nil, `{"version":%d}`, v)})
			})
			if err != nil {
				t.Errorf("a producer's transaction: %v", err)
				return
			}
			running, _ := backfills.Load("running")
			cmu.Lock()
			commits[fmt.Sprintf("%d/%d", id, v)] = commit{at: time.Now(), beside: running.(bool), version: v}
			cmu.Unlock()
		}
	}
	for i := range 4 {
		wg.Add(1)
		go produce(uint64(i))
	}
	quiet := func() {
		// A stretch of live writes with no backfill: the reference. It
		// starts once the relay has drained what a killed backfill left
		// (its events are the backfill's doing): until then live commits
		// count as beside it.
		require.Eventually(t, func() bool {
			n, err := w.driver.ReadyBacklog(ctx, 100)
			return err == nil && n < 50
		}, 5*time.Minute, 5*time.Millisecond)
		backfills.Store("running", false)
		cmu.Lock()
		n := len(commits)
		cmu.Unlock()
		require.Eventually(t, func() bool { cmu.Lock(); defer cmu.Unlock(); return len(commits) >= n+400 }, time.Minute, 10*time.Millisecond)
	}
	// The backlog bound is the relay's batch: live events then wait behind
	// at most one claim's worth of backfilled ones.
	// HERALD_BACKFILL_MAX_BACKLOG sets another bound (and the backfill's
	// batch), for a measurement of its effect.
	bound := "200"
	if v := os.Getenv("HERALD_BACKFILL_MAX_BACKLOG"); v != "" {
		bound = v
	}
	args := w.args("--rate", strconv.Itoa(max(rows/8, 1000)), "--max-backlog", bound, "--batch-size", bound)
	runUntil := func(fraction float64) *child {
		c := startChild(t, args...)
		backfills.Store("running", true)
		require.Eventually(t, func() bool {
			n, done := w.rowsDone(t)
			return done || float64(n) >= fraction*float64(rows)
		}, 30*time.Minute, 5*time.Millisecond, "backfill output:\n%s", c.out)
		return c
	}
	quiet()
	for _, at := range []float64{1.0 / 3, 2.0 / 3} {
		c := runUntil(at)
		c.kill(t)
		n, done := w.rowsDone(t)
		require.False(t, done, "killed before the end")
		t.Logf("backfill SIGKILLed after %d rows recorded", n)
		quiet()
	}
	c := startChild(t, args...)
	backfills.Store("running", true)
	require.NoError(t, c.cmd.Wait(), "backfill output:\n%s", c.out)
	require.Contains(t, c.stdout.String(), fmt.Sprintf("backfill items-e2e done: %d rows", rows))
	quiet()
	close(stopProducers)
	wg.Wait()

	// Everything written is published.
	var total int
	require.NoError(t, w.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %q.herald_outbox`, w.schema)).Scan(&total))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= total }, 5*time.Minute, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != total {
		seen, twice := map[string]int{}, []string{}
		for _, p := range got {
			if seen[p.id]++; seen[p.id] == 2 {
				var seq, attempts int64
				var state string
				_ = w.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT seq, attempts, state FROM %q.herald_outbox WHERE id = $1`, w.schema), p.id).Scan(&seq, &attempts, &state)
				twice = append(twice, fmt.Sprintf("event %s (key %s version %d backfill %v; seq %d, attempts %d, %s)", p.id, p.key, p.version, p.backfill, seq, attempts, state))
			}
		}
		t.Fatalf("%d events published for %d written; published more than once: %v; the relay's log:\n%s", len(got), total, twice, relayLog.String())
	}

	final := map[string]int{}
	r, err := w.pool.Query(context.Background(), fmt.Sprintf(`SELECT id::text, version FROM %q.items`, w.schema))
	require.NoError(t, err)
	for r.Next() {
		var (
			k string
			v int
		)
		require.NoError(t, r.Scan(&k, &v))
		final[k] = v
	}
	require.NoError(t, r.Err())

	backfilled, maxLive, last := map[string]int{}, map[string]int{}, map[string]int{}
	var liveQuiet, liveBeside []time.Duration
	equalAfter := 0
	for _, p := range got {
		if p.backfill {
			backfilled[p.key]++
			require.GreaterOrEqual(t, p.version, maxLive[p.key], "key %s: a backfilled state older than a live event published before it", p.key)
		} else {
			require.Greater(t, p.version, maxLive[p.key], "key %s: live events in commit order", p.key)
			if p.version <= last[p.key] {
				equalAfter++ // a live event after a backfill that already carried its state
			}
			maxLive[p.key] = p.version
			cm, ok := commits[p.key+"/"+strconv.Itoa(p.version)]
			if ok {
				lat := max(p.at.Sub(cm.at), 0)
				if cm.beside {
					liveBeside = append(liveBeside, lat)
				} else {
					liveQuiet = append(liveQuiet, lat)
				}
			}
		}
		last[p.key] = p.version
	}
	require.Len(t, backfilled, rows, "every row has a backfilled event")
	for k, n := range backfilled {
		require.Equal(t, 1, n, "key %s backfilled once", k)
	}
	for k, v := range final {
		require.Equal(t, v, last[k], "key %s: the last event published is the row's state", k)
	}
	p99 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)*99/100]
	}
	q, b := p99(liveQuiet), p99(liveBeside)
	ratio := float64(b) / float64(q)
	t.Logf("%d rows backfilled; live events: %d without the backfill (p99 %s), %d beside it (p99 %s); p99 ratio %.2f; "+
		"%d live events came after a backfill that carried their state already",
		rows, len(liveQuiet), q, len(liveBeside), b, ratio, equalAfter)
	if os.Getenv("HERALD_BACKFILL_CHECK_P99") == "1" {
		require.LessOrEqual(t, ratio, 2.0, "live p99 beside the backfill within 2x of its value without")
	}
}
