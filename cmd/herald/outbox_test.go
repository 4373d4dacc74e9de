package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// db is a fresh, migrated outbox in a schema of its own.
type db struct {
	flags  []string // --db and --schema
	schema string
}

func setup(t *testing.T) db {
	t.Helper()
	schema := testenv.Schema(t)
	d := db{flags: []string{"--db", testenv.PostgresDSN(t), "--schema", schema}, schema: schema}
	r := d.cli(t, "migrate")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "migrate: created outbox table")
	return d
}

// cli runs a command with args followed by this outbox's flags.
func (d db) cli(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, nil, append(args, d.flags...)...)
}

func (d db) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := testenv.PostgresPool(t).Exec(context.Background(), fmt.Sprintf(sql, d.schema), args...)
	require.NoError(t, err)
}

func TestMigrateTwiceIsIdempotent(t *testing.T) {
	t.Parallel()
	d := setup(t)
	r := d.cli(t, "migrate")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, fmt.Sprintf(`^migrate: outbox table %q\."herald_outbox" is up to date \(schema version \d+\)\n$`, d.schema), r.stdout)

	// A table of another name, given by environment variable: created.
	env := map[string]string{"HERALD_TABLE": "events_out"}
	r = cli(t, env, append([]string{"migrate"}, d.flags...)...)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, fmt.Sprintf(`^migrate: created outbox table %q\."events_out" at schema version \d+\n$`, d.schema), r.stdout)
	r = cli(t, env, append([]string{"migrate"}, d.flags...)...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "is up to date")
}

func TestMigrateSaysWhatItDid(t *testing.T) {
	t.Parallel()
	require.Equal(t, "migrate: created outbox table t at schema version 4", migrated("t", 0, 4, nil))
	require.Equal(t, "migrate: upgraded outbox table t from schema version 2 to 4", migrated("t", 2, 4, nil))
	require.Equal(t, "migrate: outbox table t is up to date (schema version 4)", migrated("t", 4, 4, nil))
	daily := &heraldpg.Partitioning{Interval: 24 * time.Hour, Ahead: 3}
	require.Equal(t, "migrate: created partitioned outbox table t at schema version 4 (by created_at, 24h a partition, 3 created ahead)",
		migrated("t", 0, 4, daily))
	require.Equal(t, "migrate: outbox table t is up to date (schema version 4)", migrated("t", 4, 4, daily))
}

func TestStatusOnAnEmptyTable(t *testing.T) {
	t.Parallel()
	d := setup(t)
	r := d.cli(t, "status")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "no rows")

	r = d.cli(t, "status", "--json")
	require.Equal(t, 0, r.code, r)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.NotNil(t, st.Topics)
	require.Empty(t, st.Topics)
	require.Zero(t, st.OldestPendingSeconds)
	require.Len(t, st.Totals, 4)
}

func TestStatusCountsByTopicAndState(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload, created_at) VALUES
		('orders', 'a', 'x', now() - interval '90 seconds'), ('orders', 'b', 'x', now()), ('billing', 'c', 'x', now())`)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload, state, dead_at, last_error)
		VALUES ('orders', 'd', 'x', 'dead', now(), 'boom')`)

	r := d.cli(t, "status")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^billing\s+ready\s+1\s`, r.stdout)
	require.Regexp(t, `(?m)^orders\s+dead\s+1\s`, r.stdout)
	require.Regexp(t, `(?m)^orders\s+ready\s+2\s+1m3\ds$`, r.stdout)
	require.Contains(t, r.stdout, "total: 3 ready, 0 claimed, 0 published, 1 dead")
	require.Regexp(t, `oldest pending: 1m3\ds`, r.stdout)

	r = d.cli(t, "status", "--json")
	require.Equal(t, 0, r.code, r)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, d.schema, st.Schema)
	require.Equal(t, []topicStatusJSON{
		{Topic: "billing", State: "ready", Count: 1, OldestSeconds: st.Topics[0].OldestSeconds},
		{Topic: "orders", State: "dead", Count: 1, OldestSeconds: st.Topics[1].OldestSeconds},
		{Topic: "orders", State: "ready", Count: 2, OldestSeconds: st.Topics[2].OldestSeconds},
	}, st.Topics)
	require.EqualValues(t, 3, st.Totals["ready"])
	require.EqualValues(t, 1, st.Totals["dead"])
	require.InDelta(t, 90, st.OldestPendingSeconds, 10)

	// The whole configuration from the environment.
	r = cli(t, map[string]string{"HERALD_DB": d.flags[1], "HERALD_SCHEMA": d.schema}, "status", "--json")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `"billing"`)
}

func TestStatusOfAnUnmigratedTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "status", "--db", testenv.PostgresDSN(t), "--schema", testenv.Schema(t))
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, "herald migrate")
}

// deadRows inserts dead rows with plain SQL, as another program could, and
// returns their ids in insert order.
func (d db) deadRows(t *testing.T, topics ...string) []string {
	t.Helper()
	rows, err := testenv.PostgresPool(t).Query(context.Background(), fmt.Sprintf(
		`INSERT INTO %s.herald_outbox (topic, key, payload, headers, attempts, state, dead_at, last_error)
		 SELECT t, 'key-' || t, convert_to('payload of ' || t, 'UTF8'), '{"Trace":"abc"}', 3, 'dead', now(), 'boom'
		 FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n RETURNING id`, d.schema), topics)
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func TestDeadList(t *testing.T) {
	t.Parallel()
	d := setup(t)
	r := d.cli(t, "dead", "list")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "no dead events\n", r.stdout)

	ids := d.deadRows(t, "a", "a", "b")
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, payload) VALUES ('a', 'still ready')`)

	r = d.cli(t, "dead", "list")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "3 dead events\n")
	for _, id := range ids {
		require.Contains(t, r.stdout, id)
	}

	r = d.cli(t, "dead", "list", "--topic", "a", "--json")
	require.Equal(t, 0, r.code, r)
	var list deadListJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.False(t, list.More)
	require.Len(t, list.Events, 2)
	require.Equal(t, ids[0], list.Events[0].ID)
	require.Equal(t, "boom", list.Events[0].LastError)
	require.Equal(t, map[string]string{"Trace": "abc"}, list.Events[0].Headers)
	require.Equal(t, 3, list.Events[0].Attempts)

	r = d.cli(t, "dead", "list", "--all", "--limit", "2")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "2 dead events shown; there are more")
	r = d.cli(t, "dead", "list", "--limit", "2", "--json")
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.True(t, list.More)
	require.Len(t, list.Events, 2)
}

func TestDeadShow(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ids := d.deadRows(t, "orders")
	var binID string
	require.NoError(t, testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
		`INSERT INTO %s.herald_outbox (topic, payload, state, dead_at, last_error, event_version, aggregate_version)
		 VALUES ('bin', '\x00ff1b5b316d'::bytea, 'dead', now(), E'line one\nline two\x1b[31m', 2, 9) RETURNING id`, d.schema)).Scan(&binID))

	r := d.cli(t, "dead", "show", ids[0])
	require.Equal(t, 0, r.code, r)
	for _, want := range []string{"id:", ids[0], "state:", "dead", "topic:", "orders", "attempts:", "3",
		"last error:", "boom", "dead at:", "Trace: abc", "payload (17 bytes):\npayload of orders\n"} {
		require.Contains(t, r.stdout, want)
	}

	// Flags after the id; a binary payload as hex; no raw escape sequence
	// reaches the terminal.
	r = d.cli(t, "dead", "show", binID)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "not UTF-8 text: hex dump")
	require.Contains(t, r.stdout, "00 ff 1b 5b 31 6d")
	require.Contains(t, r.stdout, `line one\x0aline two\x1b[31m`)
	require.NotContains(t, r.stdout, "\x1b")

	r = cli(t, nil, append([]string{"dead", "show", ids[0], "--json"}, d.flags...)...)
	require.Equal(t, 0, r.code, r)
	var ev eventDetailJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ev))
	require.Equal(t, ids[0], ev.ID)
	require.Equal(t, []byte("payload of orders"), ev.PayloadBase64)
	require.NotNil(t, ev.PayloadText)
	require.Equal(t, "payload of orders", *ev.PayloadText)
	require.NotNil(t, ev.DeadAt)
	require.WithinDuration(t, time.Now(), *ev.DeadAt, time.Minute)
	require.Equal(t, 1, ev.EventVersion)
	require.Contains(t, r.stdout, `"aggregate_version": null`, "no aggregate version is null")

	r = d.cli(t, "dead", "show", "--json", binID)
	require.Equal(t, 0, r.code, r)
	ev = eventDetailJSON{}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &ev))
	require.Nil(t, ev.PayloadText)
	require.Equal(t, []byte{0, 0xff, 0x1b, '[', '1', 'm'}, ev.PayloadBase64)
	require.Equal(t, 2, ev.EventVersion)
	require.Equal(t, int64(9), *ev.AggregateVersion)

	r = d.cli(t, "dead", "show", "0190f0a8-0000-7000-8000-000000000001")
	require.Equal(t, 1, r.code, r)
	require.Equal(t, "herald: no event with id 0190f0a8-0000-7000-8000-000000000001\n", r.stderr)
}

func TestDeadRequeueAndDiscard(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ids := d.deadRows(t, "a", "a", "a", "b", "b", "c", "d")
	count := func(where string) int {
		var n int
		require.NoError(t, testenv.PostgresPool(t).QueryRow(context.Background(),
			fmt.Sprintf(`SELECT count(*) FROM %s.herald_outbox WHERE `+where, d.schema)).Scan(&n))
		return n
	}

	r := d.cli(t, "dead", "requeue", ids[0], ids[1])
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "requeued 2 dead events\n", r.stdout)
	require.Equal(t, 2, count("state = 'ready' AND attempts = 0 AND dead_at IS NULL"))

	// The same ids again are no longer dead.
	r = d.cli(t, "dead", "requeue", ids[0], ids[2])
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "requeued 1 dead event (1 of the 2 ids given are not dead events)\n", r.stdout)

	r = d.cli(t, "dead", "discard", "--topic", "b")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "discarded 2 dead events\n", r.stdout)
	require.Zero(t, count("topic = 'b'"))

	r = d.cli(t, "dead", "discard", ids[5])
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "discarded 1 dead event\n", r.stdout)

	r = d.cli(t, "dead", "requeue", "--all")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "requeued 1 dead event\n", r.stdout) // d
	d.exec(t, `UPDATE %s.herald_outbox SET state = 'dead', dead_at = now()`)

	r = d.cli(t, "dead", "discard", "--all")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "discarded 4 dead events\n", r.stdout)
	require.Zero(t, count("true"))
}

func TestRelayPublishesThenStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload)
		SELECT 'orders.placed', 'k' || i, convert_to('order ' || i, 'UTF8') FROM generate_series(1, 250) AS i`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		// The stream is created by the relay; the broker comes from the
		// environment.
		done <- cliCtx(ctx, map[string]string{"HERALD_PUBLISHER": ns.URL(), "HERALD_BATCH_SIZE": "100"}, nil,
			append([]string{"relay", "--nats-create-stream", "ORDERS", "--nats-stream-subjects", "orders.>",
				"--log-level", "warn", "--log-format", "json"}, d.flags...)...)
	}()

	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 250
	}, 30*time.Second, 20*time.Millisecond)

	cancel() // what the first SIGINT or SIGTERM does
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop after its context was cancelled")
	}
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "relay stopped: 250 published, 0 retried, 0 dead, 0 released\n", r.stdout)
	require.NotContains(t, r.stderr, `"level":"ERROR"`)
}

func TestRelayWithUnreachableBrokerDoesNotPrintItsPassword(t *testing.T) {
	t.Parallel()
	d := setup(t)
	for _, url := range []string{"nats://relay:s3cr3t-pw@127.0.0.1:1", "nats://s3cr3t-pw@127.0.0.1:1"} {
		r := start(t, nil, append([]string{"relay", "--publisher", url}, d.flags...)...)
		require.Eventually(t, func() bool {
			return strings.Count(r.stderr.String(), "cannot reach destination default at nats://") >= 2
		}, 30*time.Second, 10*time.Millisecond, "it keeps trying: %s", r.stderr.String())
		res := r.stop(t)
		require.Equal(t, 0, res.code, res)
		require.Contains(t, res.stderr, "xxxxx@127.0.0.1:1")
		require.NotContains(t, res.stdout+res.stderr, "s3cr3t-pw")
		require.Equal(t, "relay stopped before it started\n", res.stdout)
	}
}

func TestKeysBlockedAndDiscardWithResume(t *testing.T) {
	t.Parallel()
	d := setup(t)
	// Key k1 is parked behind a dead event with two events waiting; k2's
	// dead event parks nothing.
	d.exec(t, `INSERT INTO %s.herald_outbox (id, topic, key, payload, state, dead_at, last_error, parked) VALUES
		('11111111-1111-4111-8111-111111111111', 'orders', 'k1', 'x', 'dead', now(), 'poison', true),
		('22222222-2222-4222-8222-222222222222', 'orders', 'k2', 'x', 'dead', now(), 'poison', false)`)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders', 'k1', 'x'), ('orders', 'k1', 'x')`)

	r := d.cli(t, "keys", "blocked")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `orders\s+k1\s+11111111-1111-4111-8111-111111111111\s+2\s`, r.stdout)
	require.NotContains(t, r.stdout, "k2")
	require.Contains(t, r.stdout, "1 blocked key\n")

	r = d.cli(t, "keys", "blocked", "--json")
	require.Equal(t, 0, r.code, r)
	var out keysBlockedJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Keys, 1)
	require.Equal(t, blockedKeyJSON{Topic: "orders", Key: "k1", DeadEventID: "11111111-1111-4111-8111-111111111111",
		Waiting: 2, Since: out.Keys[0].Since}, out.Keys[0])
	require.WithinDuration(t, time.Now(), out.Keys[0].Since, time.Minute)

	// Without --resume, a discard that would let k1 go on is refused whole.
	r = d.cli(t, "dead", "discard", "--all")
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stderr, `dead event 11111111-1111-4111-8111-111111111111 holds back key "k1" of topic "orders" (2 events waiting)`)
	require.Contains(t, r.stderr, "pass --resume")
	r = d.cli(t, "dead", "list", "--json")
	require.Equal(t, 0, r.code, r)
	var list deadListJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &list))
	require.Len(t, list.Events, 2, "nothing was discarded")

	r = d.cli(t, "dead", "discard", "22222222-2222-4222-8222-222222222222")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "discarded 1 dead event")

	r = d.cli(t, "dead", "discard", "--resume", "11111111-1111-4111-8111-111111111111")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "discarded 1 dead event")
	r = d.cli(t, "keys", "blocked")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "no blocked keys\n", r.stdout)
}

// A stream the relay cannot create fails the start with a line that names
// the flag, not the publisher's Go configuration.
func TestRelaySaysWhichFlagMadeAStreamItCannotCreate(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	ns.CreateStream(t, "OTHER", "orders.>") // JetStream refuses a second stream on the same subjects
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := cliCtx(ctx, map[string]string{"HERALD_PUBLISHER": ns.URL()}, nil,
		append([]string{"relay", "--nats-create-stream", "ORDERS", "--nats-stream-subjects", "orders.>"}, d.flags...)...)
	require.Equal(t, exitFailed, r.code, r)
	require.Contains(t, r.stderr, `--nats-create-stream: creating or updating stream "ORDERS"`)
	require.NotContains(t, r.stderr, "Config.")
}

// A subject no stream captures is warned of once, naming the flags that
// make a stream for it; its events are retried until one does.
func TestRelayWithoutAStreamSaysWhichFlagsMakeOne(t *testing.T) {
	t.Parallel()
	const warning = `msg="no JetStream stream captures subject; its events are retried until one does" component=herald.nats subject=orders.placed`
	for _, c := range []struct {
		name  string
		flags []string
		fix   string
	}{
		{"NoStreamFlags", nil,
			`fix="pass --nats-create-stream NAME --nats-stream-subjects orders.placed, or create a stream whose subjects include it"`},
		{"StreamOfOtherSubjects", []string{"--nats-create-stream", "BILLING", "--nats-stream-subjects", "billing.>,invoices.>"},
			`fix="add orders.placed to --nats-stream-subjects of stream BILLING, which captures billing.>,invoices.>"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := setup(t)
			ns := testenv.NATS(t)
			d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'order-42', '{}')`)
			r := start(t, nil, append(append([]string{"relay", "--publisher", ns.URL()}, c.flags...), d.flags...)...)
			require.Eventually(t, func() bool {
				return strings.Count(r.stderr.String(), `msg="publish failed"`) >= 2
			}, 30*time.Second, 10*time.Millisecond, "the event is retried: %s", r.stderr.String())
			require.Equal(t, 1, strings.Count(r.stderr.String(), warning), r.stderr.String())
			require.Contains(t, r.stderr.String(), warning+" "+c.fix)

			ns.CreateStream(t, "ORDERS", "orders.>")
			require.Eventually(t, func() bool {
				return strings.Contains(r.stderr.String(), `msg="a JetStream stream captures subject now" component=herald.nats subject=orders.placed`)
			}, 30*time.Second, 10*time.Millisecond, "the retry after the stream was made is published: %s", r.stderr.String())
			res := r.stop(t)
			require.Equal(t, 0, res.code, res)
			require.Equal(t, 1, strings.Count(res.stderr, warning), res.stderr)
			require.Contains(t, res.stdout, "1 published")
		})
	}
}

// herald migrate --print-sql connects to nothing, so it needs no --db:
// the script is PostgreSQL's unless --db (or HERALD_DB) names another
// database.
func TestMigratePrintSQLNeedsNoDB(t *testing.T) {
	t.Parallel()
	r := cli(t, nil, "migrate", "--print-sql")
	require.Equal(t, 0, r.code, r)
	require.Empty(t, r.stderr)
	require.Contains(t, r.stdout, `CREATE TABLE "public"."herald_outbox" (`)
	pg := cli(t, nil, "migrate", "--print-sql", "--db", "postgres://u@127.0.0.1:1/db")
	require.Equal(t, 0, pg.code, pg)
	require.Equal(t, pg.stdout, r.stdout, "the same script as with a PostgreSQL --db")

	r = cli(t, nil, "migrate", "--print-sql", "--schema", "shop", "--table", "events", "--from", "2")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `"shop"."events"`)
	require.NotContains(t, r.stdout, "herald_outbox (")

	// --db, from the flag or the environment, still chooses the database.
	sqlite := cli(t, nil, "migrate", "--print-sql", "--db", "sqlite:"+t.TempDir()+"/x.db")
	require.Equal(t, 0, sqlite.code, sqlite)
	require.NotEqual(t, pg.stdout, sqlite.stdout)
	require.NotContains(t, sqlite.stdout, `"public"`)
	r = cli(t, map[string]string{"HERALD_DB": "sqlite:" + t.TempDir() + "/y.db"}, "migrate", "--print-sql")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, sqlite.stdout, r.stdout)
	mysql := cli(t, nil, "migrate", "--print-sql", "--db", "mysql://u@127.0.0.1:1/db")
	require.Equal(t, 0, mysql.code, mysql)
	require.NotEqual(t, pg.stdout, mysql.stdout)
	require.NotContains(t, mysql.stdout, "BEGIN")

	// What still needs --db, or is still wrong without it.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate"}, "herald: --db (or HERALD_DB) is required"},
		{[]string{"migrate", "--print-sql", "--from", "99"}, "herald: --from: 99 is not a schema version this herald knows"},
		{[]string{"migrate", "--print-sql", "--partition"}, "--print-sql prints the plain table's migrations only"},
		{[]string{"migrate", "--print-sql", "--table", "bad name"}, "--table"},
	} {
		r := cli(t, nil, c.args...)
		require.Equal(t, 2, r.code, "%v: %v", c.args, r)
		require.Contains(t, r.stderr, c.want, c.args)
	}
}
