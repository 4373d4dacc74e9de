package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/testenv"
)

// pgDatabase is a database of its own on the test server (not a schema),
// migrated, dropped when the test ends.
type pgDatabase struct {
	name, dsn string
	pool      *pgxpool.Pool
}

func newPGDatabase(t *testing.T, admin *pgxpool.Pool) pgDatabase {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "herald_mdb_" + hex.EncodeToString(b[:])
	_, err := admin.Exec(context.Background(), "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(testenv.PostgresDSN(t))
	require.NoError(t, err)
	u.Path = "/" + name
	r := cli(t, nil, "migrate", "--db", u.String())
	require.Equal(t, 0, r.code, r)
	pool, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pgDatabase{name: name, dsn: u.String(), pool: pool}
}

// writeEvents writes n events of topic over keys k0..k(keys-1), each
// payload "db:key:i" so that the order of a key can be read back.
func (d pgDatabase) writeEvents(t *testing.T, db, topic string, from, n, keys int) {
	t.Helper()
	_, err := d.pool.Exec(context.Background(), `INSERT INTO herald_outbox (topic, key, payload)
		SELECT $1, 'k' || (i % $4), convert_to($2 || ':k' || (i % $4) || ':' || i, 'UTF8')
		FROM generate_series($3::int, $3::int + $5::int - 1) AS i ORDER BY i`, topic, db, from, keys, n)
	require.NoError(t, err)
}

func writeSQLiteEvents(t *testing.T, sdb *sql.DB, db, topic string, from, n, keys int) {
	t.Helper()
	tx, err := sdb.Begin()
	require.NoError(t, err)
	for i := from; i < from+n; i++ {
		key := fmt.Sprintf("k%d", i%keys)
		_, err := tx.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES (?, ?, ?)`,
			topic, key, []byte(fmt.Sprintf("%s:%s:%d", db, key, i)))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
}

// received reads every message of a stream: payloads by database, in
// stream order.
func received(t *testing.T, stream jetstream.Stream) map[string][]string {
	t.Helper()
	info, err := stream.Info(context.Background())
	require.NoError(t, err)
	out := map[string][]string{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := stream.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		db, _, _ := strings.Cut(string(m.Data), ":")
		out[db] = append(out[db], string(m.Data))
	}
	return out
}

// requireEveryEventInKeyOrder checks that got holds each of n events of
// db once at least, each key's first deliveries in write order.
func requireEveryEventInKeyOrder(t *testing.T, db string, got []string, n int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, p := range got {
		parts := strings.Split(p, ":")
		require.Len(t, parts, 3, p)
		i, err := strconv.Atoi(parts[2])
		require.NoError(t, err)
		if seen[p] {
			continue // a redelivery
		}
		seen[p] = true
		require.Greater(t, i, last[parts[1]], "database %s key %s: %s came after %d", db, parts[1], p, last[parts[1]])
		last[parts[1]] = i
	}
	require.Len(t, seen, n, "database %s: every event arrives", db)
}

func databasesOf(t *testing.T, addr string) map[string]databaseJSON {
	t.Helper()
	_, rj := readiness(t, addr)
	out := map[string]databaseJSON{}
	for _, d := range rj.Databases {
		out[d.Name] = d
	}
	return out
}

func post(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(t, resp))
	return resp.StatusCode, b.String()
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

// One relay process, three PostgreSQL databases and a SQLite file, to an
// embedded NATS: every event of the healthy databases arrives in its key's
// order while the third PostgreSQL database cannot be reached; /readyz
// names it; once it answers its events follow. An operator stops and
// starts one database without the others.
func TestRelayRelaysSeveralDatabases(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	const canary = "canary-Pw-8812"
	const token = "multi-db-admin-token-0099"
	admin := testenv.PostgresPool(t)
	a, b, c := newPGDatabase(t, admin), newPGDatabase(t, admin), newPGDatabase(t, admin)
	// a's DSN carries a password (trust authentication takes any) and
	// comes from a file; c is reached through a proxy that refuses it.
	ua, err := url.Parse(a.dsn)
	require.NoError(t, err)
	ua.User = url.UserPassword(ua.User.Username(), canary)
	aFile := filepath.Join(t.TempDir(), "a.dsn")
	require.NoError(t, os.WriteFile(aFile, []byte(ua.String()+"\n"), 0o600))
	uc, err := url.Parse(c.dsn)
	require.NoError(t, err)
	proxy := testenv.NewProxy(t, uc.Host)
	proxy.RefuseNew()
	uc.Host = proxy.Addr()
	litePath := filepath.Join(t.TempDir(), "lite.db")
	r := cli(t, nil, "migrate", "--db", "sqlite:"+litePath)
	require.Equal(t, 0, r.code, r)
	lite, err := sql.Open("sqlite", litePath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lite.Close() })

	ns := testenv.NATS(t)
	stream := ns.CreateStream(t, "MULTI", "multi.>")
	addr := freeAddr(t)
	a.writeEvents(t, "a", "multi.a", 1, 60, 3)
	b.writeEvents(t, "b", "multi.b", 1, 60, 3)
	writeSQLiteEvents(t, lite, "lite", "multi.lite", 1, 60, 3)
	c.writeEvents(t, "c", "multi.c", 1, 30, 3)

	env := map[string]string{"HERALD_ADMIN_TOKEN": token, "HERALD_DB_A_FILE": aFile, "HERALD_DB_C": uc.String()}
	run := start(t, env, "relay", "--db", "b="+b.dsn, "--db", "lite=sqlite:"+litePath,
		"--databases", "a,c", "--publisher", ns.URL(), "--admin-addr", addr,
		"--poll-interval", "2ms", "--idle-poll-interval", "20ms", "--batch-size", "7")

	t.Run("TheHealthyDatabasesAreRelayedWhileOneCannotBeReached", func(t *testing.T) {
		require.Eventually(t, func() bool {
			got := received(t, stream)
			return len(got["a"]) >= 60 && len(got["b"]) >= 60 && len(got["lite"]) >= 60
		}, 60*time.Second, 20*time.Millisecond, "stderr: %s", run.stderr.String())
		got := received(t, stream)
		for db, n := range map[string]int{"a": 60, "b": 60, "lite": 60} {
			requireEveryEventInKeyOrder(t, db, got[db], n)
		}
		require.Empty(t, got["c"])

		code, rj := readiness(t, addr)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.False(t, rj.Ready)
		dbs := databasesOf(t, addr)
		for _, name := range []string{"a", "b", "lite"} {
			require.Equal(t, dbRunning, dbs[name].State, name)
			require.True(t, dbs[name].Ready, name)
		}
		require.Equal(t, dbStarting, dbs["c"].State)
		require.Contains(t, dbs["c"].Database, "cannot reach the database postgres@"+proxy.Addr())
		require.Contains(t, rj.Database, "c: cannot reach the database", "the top-level error names the database")
		require.Contains(t, run.stderr.String(), `msg="waiting for the database before relaying" database=c`)
	})

	t.Run("MetricsCarryTheDatabaseLabel", func(t *testing.T) {
		var metrics string
		require.Eventually(t, func() bool {
			code, body, err := get(addr, "/metrics")
			metrics = body
			return err == nil && code == http.StatusOK &&
				strings.Contains(body, `herald_published_total{database="lite",destination="default",topic="multi.lite"} 60`)
		}, 30*time.Second, 20*time.Millisecond)
		require.Contains(t, metrics, `herald_published_total{database="a",destination="default",topic="multi.a"} 60`)
		require.Contains(t, metrics, `herald_relay_up{database="b"} 1`)
		require.Contains(t, metrics, `herald_relay_up{database="c"} 0`)
		require.Equal(t, 1, strings.Count(metrics, "# TYPE herald_relay_up gauge"), "one family for every database")
		require.Contains(t, metrics, `herald_destination_breaker{destination="default",state="closed"} 1`,
			"the destinations' metrics belong to the process: no database label")
		require.Equal(t, 1, strings.Count(metrics, "\ngo_goroutines "), "the Go runtime's metrics once")
		require.NotContains(t, metrics, canary)
	})

	t.Run("TheUnreachableDatabaseResumesWhenItAnswers", func(t *testing.T) {
		proxy.Heal()
		require.Eventually(t, func() bool {
			return len(received(t, stream)["c"]) >= 30
		}, 60*time.Second, 20*time.Millisecond, "stderr: %s", run.stderr.String())
		requireEveryEventInKeyOrder(t, "c", received(t, stream)["c"], 30)
		require.Eventually(t, func() bool {
			code, rj := readiness(t, addr)
			return code == http.StatusOK && rj.Ready
		}, 30*time.Second, 20*time.Millisecond)
	})

	t.Run("AnOperatorStopsAndStartsOneDatabase", func(t *testing.T) {
		code, _ := post(t, addr, "/databases/b/stop", "")
		require.Equal(t, http.StatusUnauthorized, code, "no token, no action")
		code, _ = post(t, addr, "/databases/b/stop", "wrong-token-of-some-length")
		require.Equal(t, http.StatusUnauthorized, code)
		code, _ = post(t, addr, "/databases/nosuch/stop", token)
		require.Equal(t, http.StatusNotFound, code)
		code, body := post(t, addr, "/databases/b/stop", token)
		require.Equal(t, http.StatusOK, code, body)
		var dj databasesJSON
		require.NoError(t, json.Unmarshal([]byte(body), &dj))
		require.Equal(t, databaseJSON{Name: "b", State: dbStopped}, dj.Databases[0], "--db before --databases")

		b.writeEvents(t, "b", "multi.b", 61, 10, 3)
		writeSQLiteEvents(t, lite, "lite", "multi.lite", 61, 10, 3)
		require.Eventually(t, func() bool {
			return len(received(t, stream)["lite"]) >= 70
		}, 30*time.Second, 20*time.Millisecond, "the others go on")
		code, rj := readiness(t, addr)
		require.Equal(t, http.StatusOK, code, "a database an operator stopped does not make the relay unready: %+v", rj)
		require.Equal(t, dbStopped, databasesOf(t, addr)["b"].State)
		var ready int
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT count(*) FROM herald_outbox WHERE state = 'ready'`).Scan(&ready))
		require.Equal(t, 10, ready, "the stopped database's events wait")

		code, body = post(t, addr, "/databases/b/start", token)
		require.Equal(t, http.StatusOK, code, body)
		require.Eventually(t, func() bool {
			return len(received(t, stream)["b"]) >= 70
		}, 30*time.Second, 20*time.Millisecond)
		requireEveryEventInKeyOrder(t, "b", received(t, stream)["b"], 70)
		require.Contains(t, run.stderr.String(), `msg="database stopped by an operator" component=herald.audit database=b`)
	})

	t.Run("EachDatabaseHasItsAdminPage", func(t *testing.T) {
		var deadA string
		require.NoError(t, a.pool.QueryRow(context.Background(), `INSERT INTO herald_outbox
			(topic, payload, state, dead_at, last_error) VALUES ('multi.a', 'x', 'dead', now(), 'boom in a')
			RETURNING id::text`).Scan(&deadA))
		page := func(path string) string {
			code, body, err := get(addr, path)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
			return body
		}
		for _, name := range []string{"a", "b", "c", "lite"} {
			body := page("/db/" + name + "/")
			require.Contains(t, body, `href="/db/`+name+`/" data-database="`+name+`" aria-current="true"`,
				"the page of %s says which database it shows", name)
			for _, other := range []string{"a", "b", "c", "lite"} {
				require.Contains(t, body, `href="/db/`+other+`/" data-database="`+other+`"`, "and links every database")
			}
			require.Contains(t, body, `href="/db/`+name+`/dead"`, "its own pages are under its path")
		}
		require.Contains(t, page("/db/a/dead"), deadA, "a's dead letters on a's page")
		require.Contains(t, page("/db/a/events/"+deadA), "boom in a")
		require.NotContains(t, page("/db/b/dead"), deadA, "and not on b's")
		code, _, err := get(addr, "/db/b/events/"+deadA)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, code, "b's page does not find a's event")
		require.Contains(t, page("/"), `data-database="b" aria-current="true"`, "/ is the first database's page")
	})

	res := run.stop(t)
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "relay stopped: 230 published")
	require.Contains(t, res.stdout, "database b: 70 published")
	require.Contains(t, res.stdout, "database c: 30 published")
	require.NotContains(t, res.stdout+res.stderr, canary)
}

// Fair shares: one database's large backlog drains through a slow,
// routed destination while another database writes a trickle of events to
// the same destination. The trickle's commit-to-publish time stays
// bounded all along: the backlog cannot take the destination's publish
// slots (nor the process's byte budget) another database needs.
func TestOneDatabasesBacklogDoesNotStarveAnother(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const backlog = 1500
	var (
		mu                 sync.Mutex
		bulkSeen           int
		bulkFirst, bulkEnd time.Time // the backlog's first and last delivery
		trickleLatency     []time.Duration
		trickleWhileBacked int // trickle events that arrived while the backlog drained
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Herald-Topic") == "bulk" {
			time.Sleep(10 * time.Millisecond) // a slow consumer
			mu.Lock()
			if bulkSeen == 0 {
				bulkFirst = time.Now()
			}
			bulkSeen++
			if bulkSeen == backlog {
				bulkEnd = time.Now()
			}
			mu.Unlock()
			return
		}
		written, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		trickleLatency = append(trickleLatency, time.Since(time.Unix(0, written)))
		if bulkSeen < backlog {
			trickleWhileBacked++
		}
	}))
	t.Cleanup(hook.Close)

	dir := t.TempDir()
	open := func(name string) (string, *sql.DB) {
		path := filepath.Join(dir, name+".db")
		r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
		require.Equal(t, 0, r.code, r)
		sdb, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
		require.NoError(t, err)
		t.Cleanup(func() { _ = sdb.Close() })
		return path, sdb
	}
	bulkPath, bulk := open("bulk")
	tickPath, tick := open("tick")
	tx, err := bulk.Begin()
	require.NoError(t, err)
	for i := range backlog {
		_, err := tx.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES ('bulk', ?, 'x')`, fmt.Sprintf("k%d", i%40))
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())

	env := map[string]string{"HERALD_WEBHOOK_SECRET": secret, "HERALD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}
	run := start(t, env, "relay", "--db", "bulk=sqlite:"+bulkPath, "--db", "tick=sqlite:"+tickPath,
		"--destination", "hook="+hook.URL+"/in", "--route", "bulk=hook", "--route", "tick=hook",
		"--batch-size", "100", "--poll-interval", "2ms", "--idle-poll-interval", "20ms", "--log-level", "warn")

	// The trickle: one event every 20ms until the backlog has drained.
	ticker := time.NewTicker(20 * time.Millisecond)
	defer ticker.Stop()
	written := 0
	for drained := false; !drained; {
		select {
		case <-ticker.C:
		case <-time.After(60 * time.Second):
			t.Fatalf("the backlog did not drain: stderr: %s", run.stderr.String())
		}
		_, err := tick.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES ('tick', 't', ?)`,
			strconv.FormatInt(time.Now().UnixNano(), 10))
		require.NoError(t, err)
		written++
		mu.Lock()
		drained = bulkSeen >= backlog
		mu.Unlock()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(trickleLatency) >= written
	}, 60*time.Second, 10*time.Millisecond, "every trickle event arrives")

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, trickleWhileBacked, 10, "the trickle ran while the backlog drained")
	// Starved, the trickle's first events would wait for the whole
	// backlog. The bound is relative to the backlog's own drain, so that a
	// slow machine, which stretches both, does not decide the outcome.
	slowest, drain := slices.Max(trickleLatency), bulkEnd.Sub(bulkFirst)
	t.Logf("backlog of %d drained in %s beside %d trickle events; slowest trickle event: %s", backlog, drain, written, slowest)
	require.Less(t, slowest, drain/2, "a trickle event waited behind half the other database's backlog")
}

func TestShareOfTheByteBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		total     int64
		databases int
		want      int64
	}{
		{64 << 20, 1, 64 << 20},
		{64 << 20, 4, 16 << 20},
		{10, 3, 3},
		{2, 3, 1}, // never 0, which would mean the default
		{-1, 3, -1},
	} {
		require.Equal(t, tc.want, shareOf(tc.total, tc.databases), "%d bytes over %d databases", tc.total, tc.databases)
	}
}

func TestNamedDatabasesAreReadFromTheirFlagsAndVariables(t *testing.T) {
	t.Parallel()
	t.Run("NameEqualsDSNIsNamedOnlyBeforeADSN", func(t *testing.T) {
		t.Parallel()
		for raw, want := range map[string][3]string{
			"orders=postgres://u@h/db":        {"orders", "postgres://u@h/db", "named"},
			"lite=sqlite:x.db":                {"lite", "sqlite:x.db", "named"},
			"eu-1=host=h dbname=d":            {"eu-1", "host=h dbname=d", "named"},
			"host=h dbname=d":                 {"", "host=h dbname=d", ""},
			"password=a=b host=h":             {"", "password=a=b host=h", ""},
			"postgres://u@h/db?sslmode=false": {"", "postgres://u@h/db?sslmode=false", ""},
			"Orders=postgres://u@h/db":        {"", "Orders=postgres://u@h/db", ""},
		} {
			name, dsn, named := splitNamedDSN(raw)
			got := [3]string{name, dsn, ""}
			if named {
				got[2] = "named"
			}
			require.Equal(t, want, got, raw)
		}
	})

	t.Run("MistakesGiveOneClearLineWithoutTheSecret", func(t *testing.T) {
		t.Parallel()
		const secret = "hunter2-Multi"
		dsn := "postgres://u:" + secret + "@127.0.0.1:1/db"
		for _, tc := range []struct {
			name string
			env  map[string]string
			args []string
			says string
		}{
			{"ANameGivenTwice", nil, []string{"--db", "a=" + dsn, "--db", "a=" + dsn},
				`herald: --db a: database "a" is also given by --db a: each name once`},
			{"APlainDSNBesideOneNamedDefault", nil, []string{"--db", dsn, "--db", "default=" + dsn},
				`herald: --db default: database "default" is also given by --db: each name once`},
			{"ANameWithoutItsVariable", nil, []string{"--databases", "orders"},
				"herald: --databases names orders, but HERALD_DB_ORDERS (or HERALD_DB_ORDERS_FILE) is not set: it holds that database's DSN"},
			{"ABadName", nil, []string{"--databases", "Orders"}, `herald: --databases: name "Orders" must match`},
			{"ANameThatReadsAsAFileVariable", nil, []string{"--databases", "file"}, `herald: --databases: name "file" would read as a _FILE variable`},
			{"ABadDSNInAVariable", map[string]string{"HERALD_DB_ORDERS": "mongodb://u:" + secret + "@h/db"}, []string{"--databases", "orders"},
				`herald: HERALD_DB_ORDERS: scheme "mongodb" is not supported`},
			{"AMissingSQLiteFile", nil, []string{"--db", "lite=sqlite:/nonexistent/x.db"},
				"herald: --db lite: SQLite database /nonexistent/x.db does not exist"},
			{"NoDatabase", nil, nil, "herald: --db (or HERALD_DB) is required"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := cli(t, tc.env, append([]string{"relay", "--publisher", "nats://127.0.0.1:1"}, tc.args...)...)
				require.Equal(t, 2, r.code, r)
				require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
				require.True(t, strings.HasPrefix(r.stderr, tc.says), r.stderr)
				require.NotContains(t, r.stderr, secret)
			})
		}
	})
}

// With several databases, one whose server refuses the configuration (a
// database that does not exist) is reported and not relayed; the others
// are. With only that one, the relay ends, as it always has.
func TestADatabaseThatRefusesDoesNotStopTheOthers(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.PostgresDSN(t))
	require.NoError(t, err)
	u.Path = "/herald_no_such_database"
	litePath := filepath.Join(t.TempDir(), "lite.db")
	r := cli(t, nil, "migrate", "--db", "sqlite:"+litePath)
	require.Equal(t, 0, r.code, r)
	lite, err := sql.Open("sqlite", litePath)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lite.Close() })
	writeSQLiteEvents(t, lite, "lite", "multi.lite", 1, 20, 2)
	ns := testenv.NATS(t)
	stream := ns.CreateStream(t, "REFUSED", "multi.>")
	addr := freeAddr(t)

	run := start(t, nil, "relay", "--db", "gone="+u.String(), "--db", "lite=sqlite:"+litePath, "--publisher", ns.URL(),
		"--admin-addr", addr, "--poll-interval", "2ms", "--idle-poll-interval", "20ms")
	require.Eventually(t, func() bool {
		return len(received(t, stream)["lite"]) >= 20
	}, 30*time.Second, 20*time.Millisecond, "stderr: %s", run.stderr.String())
	requireEveryEventInKeyOrder(t, "lite", received(t, stream)["lite"], 20)
	var dbs map[string]databaseJSON
	require.Eventually(t, func() bool {
		dbs = databasesOf(t, addr)
		return dbs["gone"].State == dbFailed
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, dbs["gone"].Database, `database "herald_no_such_database" does not exist`)
	code, rj := readiness(t, addr)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, rj.Database, "gone: ")
	require.Contains(t, run.stderr.String(), `level=ERROR msg="the database refused: not relaying it; the others go on`)
	res := run.stop(t)
	require.Equal(t, 0, res.code, res)
	require.Contains(t, res.stdout, "database lite: 20 published")
}

// FuzzSplitNamedDSN: reading NAME=DSN never loses or changes a byte of
// what was given, and never takes a libpq keyword for a name.
func FuzzSplitNamedDSN(f *testing.F) {
	for _, s := range []string{"orders=postgres://u:p@h/db", "host=h dbname=d", "a=sqlite:x", "password=a=b host=h", "x=", "=postgres://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		name, dsn, named := splitNamedDSN(raw)
		if !named {
			require.Equal(t, raw, dsn)
			require.Empty(t, name)
			return
		}
		require.Equal(t, raw, name+"="+dsn)
		require.Regexp(t, databaseName, name)
		require.False(t, heraldspec.DSNKeyword(name), name)
	})
}
