package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// writeConfig writes a configuration file for a test and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// The relay reads its database, destination, route and settings from the
// file, with the secrets it refers to from the environment.
func TestRelayRunsFromAConfigFile(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload)
		SELECT 'orders.placed', 'k' || i, convert_to('order ' || i, 'UTF8') FROM generate_series(1, 50) AS i`)
	path := writeConfig(t, fmt.Sprintf(`
log:
  level: warn
  format: json
database: ${APP_DB}
outbox:
  schema: %s
destinations:
  events: %s
routes:
  - topic: orders.>
    destination: events
nats:
  create_stream: ORDERS
  stream_subjects: orders.>
relay:
  batch_size: 20
`, d.schema, ns.URL()))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, map[string]string{"APP_DB": testenv.PostgresDSN(t)}, nil, "relay", "--config", path)
	}()
	require.Eventually(t, func() bool {
		var published int
		err := testenv.PostgresPool(t).QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(*) FROM %s.herald_outbox WHERE state = 'published'`, d.schema)).Scan(&published)
		return err == nil && published == 50
	}, 30*time.Second, 20*time.Millisecond)
	cancel()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop after its context was cancelled")
	}
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "relay stopped: 50 published, 0 retried, 0 dead, 0 released\n", r.stdout)
}

// Flags win over variables, and variables over the file; config show says
// where each value came from and masks every secret.
func TestConfigShowSaysWhereEachValueCameFrom(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
database: ${APP_DB}
destinations:
  orders:
    url: nats://relay@nats.internal:4222
    password: ${NATS_PASSWORD}
  hooks: https://hooks.example.com/services/T0/B0/XXXX
relay:
  batch_size: 500
  max_in_flight: 8
  lease: 30s
admin:
  token: ${ADMIN_TOKEN}
`)
	env := map[string]string{
		"APP_DB":           "postgres://herald:db-pw-0042@db.internal:5432/app",
		"NATS_PASSWORD":    "nats-pw-0042",
		"ADMIN_TOKEN":      "admin-token-0042-0042-0042-0042-0042",
		"HERALD_LEASE":     "45s",
		"HERALD_CONFIG":    path,
		"HERALD_LOG_LEVEL": "debug",
	}
	r := cli(t, env, "config", "show", "--batch-size", "200")
	require.Equal(t, 0, r.code, r)
	for _, want := range []string{
		"batch_size: 200 # --batch-size",
		"max_in_flight: 8 # relay.max_in_flight (" + path + ":10)",
		"lease: 45s # HERALD_LEASE",
		"level: debug # HERALD_LOG_LEVEL",
		"format: text # default",
		"database: postgres://herald:xxxxx@db.internal:5432/app # database (" + path + ":2)",
		"password: xxxxx # destinations.orders.password (" + path + ":6)",
		"url: https://hooks.example.com # destinations",
		"token: xxxxx # admin.token (" + path + ":13)",
	} {
		require.Contains(t, r.stdout, want)
	}
	for _, secret := range []string{"db-pw-0042", "nats-pw-0042", "admin-token-0042", "XXXX"} {
		require.NotContains(t, r.stdout+r.stderr, secret)
	}
}

// A variable the process sets hides the file's setting, also when the
// process gives it as a _FILE twin: the two never combine into "both set".
func TestTheProcesssVariableHidesTheFilesSetting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsnFile := filepath.Join(dir, "dsn")
	require.NoError(t, os.WriteFile(dsnFile, []byte("postgres://a@from-file:5432/app\n"), 0o600))
	path := writeConfig(t, "database: postgres://a@from-config:5432/app\n")
	r := cli(t, map[string]string{"HERALD_DB_FILE": dsnFile}, "config", "show", "--config", path)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "database: postgres://a@from-file:5432/app # HERALD_DB")
	require.NotContains(t, r.stdout, "from-config")
}

func TestConfigCheckRefusesABadFileWithItsLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, file, says string }{
		{"UnknownKey", "relay:\n  batch_sise: 5\n", `:2: unknown key relay.batch_sise (did you mean "relay.batch_size"?`},
		{"UnknownSection", "relays:\n  batch_size: 5\n", ":1: unknown key relays"},
		{"WrongType", "relay:\n  batch_size: five\n", `:2: relay.batch_size: invalid value "five": not an integer`},
		{"WrongDuration", "relay:\n  lease: 5\n", `:2: relay.lease: invalid value "5": not a duration`},
		{"NotAMapping", "relay: [1, 2]\n", ":1: relay must be a mapping of keys to values"},
		{"ListForAValue", "relay:\n  batch_size: [1]\n", ":2: relay.batch_size takes a single value, not a list"},
		{"KeyTwice", "relay:\n  lease: 1m\n  lease: 2m\n", ":3: relay.lease is given twice"},
		{"MissingReference", "database: ${NOT_SET_ANYWHERE}\n", ":1: database refers to ${NOT_SET_ANYWHERE}, which is not set"},
		{"InlineDSNPassword", "database: postgres://u:hunter2@h/db\n", ":1: database holds a password, which is never written in the file"},
		{"InlineKeywordPassword", "database: host=h password=hunter2\n", ":1: database holds a password"},
		{"InlineURLPassword", "destinations:\n  o: nats://u:hunter2@h\n", ":2: destinations.o holds a password"},
		{"InlineSecret", "admin:\n  token: hunter2-hunter2\n", ":2: admin.token is a secret, given by reference only"},
		{"InlineDestinationSecret", "destinations:\n  o:\n    url: nats://h\n    token: hunter2\n", ":4: destinations.o.token is a secret"},
		{"DestinationWithoutURL", "destinations:\n  o:\n    password_file: /x\n", ":2: destinations.o has no url"},
		{"BadDestinationName", "destinations:\n  Orders!: nats://h\n", `:2: destinations: name "Orders!" must match`},
		{"RouteWithoutDestination", "routes:\n  - topic: a.>\n", ":2: routes[0] needs a topic and a destination"},
		{"BadYAML", "relay: [1\n", "did not find expected ',' or ']'"},
		{"BadDestinationURL", "database: postgres://u@h/db\ndestinations:\n  o: carrier://h\n", `destinations (`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tc.file)
			r := cli(t, nil, "config", "check", "--config", path)
			require.Equal(t, 2, r.code, r)
			require.Contains(t, r.stderr, tc.says)
			require.NotContains(t, r.stderr, "hunter2")
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %s", r.stderr)
		})
	}
}

// config check reads everything the relay would and connects to nothing:
// the database and the broker named here do not exist.
func TestConfigCheckConnectsToNothing(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, `
database: postgres://herald@db.invalid:5432/app
destinations:
  orders: nats://nats.invalid:4222
relay:
  batch_size: 100
`)
	r := cli(t, nil, "config", "check", "--config", path)
	require.Equal(t, 0, r.code, r)
	require.Equal(t, path+": valid for herald relay (nothing was connected to)\n", r.stdout)

	r = cli(t, nil, "config", "check")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "--config (or HERALD_CONFIG) is required")
}

// A value from the file that a later check refuses is named by its key
// and line, not by the variable the file stands for.
func TestErrorsNameTheFilesKey(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "database: postgres://u@h/db\nrelay:\n  ordering: sideways\ndestinations:\n  o: nats://h\n")
	r := cli(t, nil, "config", "check", "--config", path)
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "relay.ordering ("+path+":3)")
}

// Every configuration flag of every command has a key in the file, or is
// one of the keys that are not a single value.
func TestConfigKeysCoverEveryVariable(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		f := newFlagSet(c.name)
		c.setup(f)
		f.fs.VisitAll(func(fl *flag.Flag) {
			if _, env := f.envOf[fl.Name]; env && !hasConfigKey(fl.Name) {
				t.Errorf("herald %s --%s (%s) has no key in the configuration file: add it to configSettings", c.name, fl.Name, f.envOf[fl.Name])
			}
		})
	}
	for _, s := range configSettings {
		if s.flag != "" && !regexp.MustCompile(`^[a-z]+(_[a-z]+)*(\.[a-z]+(_[a-z]+)*)?$`).MatchString(s.key) {
			t.Errorf("key %s: keys are snake_case, at most one section deep", s.key)
		}
	}
}

// docs/config.md holds the reference `herald config reference` prints;
// HERALD_UPDATE_DOCS=1 rewrites it.
func TestConfigReferenceIsCurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "..", "docs", "config.md")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	const begin, end = "<!-- config-reference: begin (generated by herald config reference) -->\n", "<!-- config-reference: end -->"
	before, rest, ok := strings.Cut(string(b), begin)
	require.True(t, ok, "docs/config.md has no %q marker", begin)
	current, after, ok := strings.Cut(rest, end)
	require.True(t, ok, "docs/config.md has no %q marker", end)
	want := configReference()
	if os.Getenv("HERALD_UPDATE_DOCS") == "1" {
		require.NoError(t, os.WriteFile(path, []byte(before+begin+want+end+after), 0o644))
		return
	}
	require.Equal(t, want, current, "docs/config.md's reference is stale: run HERALD_UPDATE_DOCS=1 go test ./cmd/herald -run TestConfigReferenceIsCurrent")
	r := cli(t, nil, "config", "reference")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, want, r.stdout)
}

// Every command that takes --db reads the file: migrate creates the table
// the file names, and status reads it.
func TestEveryDatabaseCommandReadsTheFile(t *testing.T) {
	t.Parallel()
	schema := testenv.Schema(t)
	path := writeConfig(t, fmt.Sprintf("database: ${APP_DB}\noutbox:\n  schema: %s\n  table: from_config\n", schema))
	env := map[string]string{"APP_DB": testenv.PostgresDSN(t), "HERALD_CONFIG": path}
	r := cli(t, env, "migrate")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, fmt.Sprintf("migrate: created outbox table %q.\"from_config\"", schema))
	r = cli(t, env, "status", "--json")
	require.Equal(t, 0, r.code, r)
	r = cli(t, env, "dead", "list")
	require.Equal(t, 0, r.code, r)
}
