package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false
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
// is compared with the p99 between its runs (logged; asserted within 2x
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
	relay, err := herald.NewRelay(&herald.RelayConfig{Store: w.driver, BatchSize: 500,
		Publisher: herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
			now := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, e := range batch {
				var p struct{ Version int }
				if err := json.Unmarshal(e.Payload, &p); err != nil {
					return err
				}
				got = append(got, published{key: e.Key, version: p.Version, backfill: e.Headers[herald.HeaderBackfill] != "", at: now})
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
		cmu       sync.Mutex
		commits   = map[string]commit{} // key/version
		backfills sync.Map              // "running" -> bool
		wg        sync.WaitGroup
	)
	backfills.Store("running", false)
	produce := func(seed uint64) {
		defer wg.Done()
		rnd := rand.New(rand.NewPCG(seed, 1))
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id := 1 + rnd.IntN(rows)
			var v int
			err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, fmt.Sprintf(`UPDATE %q.items SET version = version + 1 WHERE id = $1 RETURNING version`, w.schema),
					id).Scan(&v); err != nil {
					return err
				}
				return writer.WriteTx(ctx, tx, herald.Message{Topic: "items", Key: strconv.Itoa(id), Payload: fmt.Appendf(nil, `{"version":%d}`, v)})
			})
			if ctx.Err() != nil {
				return
			}
			require.NoError(t, err)
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
		// A stretch of live writes with no backfill: the reference.
		backfills.Store("running", false)
		cmu.Lock()
		n := len(commits)
		cmu.Unlock()
		require.Eventually(t, func() bool { cmu.Lock(); defer cmu.Unlock(); return len(commits) >= n+400 }, time.Minute, 10*time.Millisecond)
	}
	args := w.args("--rate", strconv.Itoa(max(rows/8, 1000)), "--max-backlog", "5000")
	runUntil := func(fraction float64) *child {
		c := startChild(t, args...)
		backfills.Store("running", true)
		require.Eventually(t, func() bool {
			n, done := w.rowsDone(t)
			return done || float64(n) >= fraction*float64(rows)
		}, 10*time.Minute, 5*time.Millisecond, "backfill output:\n%s", c.out)
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
	cancel()
	wg.Wait()

	// Everything written is published.
	var total int
	require.NoError(t, w.pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %q.herald_outbox`, w.schema)).Scan(&total))
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= total }, 5*time.Minute, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, total, "no event published twice")

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
