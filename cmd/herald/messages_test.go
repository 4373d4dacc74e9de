package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An unknown flag is answered like an unknown command: with the flag of the
// same command it is closest to, however it was written.
func TestUnknownFlagSuggestsTheClosestOne(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"TwoDashes", []string{"relay", "--batchsize", "10"}, `herald: unknown flag --batchsize (did you mean "--batch-size"? see herald relay -h)`},
		{"NameEqualsValue", []string{"relay", "--batchsize=10"}, `herald: unknown flag --batchsize (did you mean "--batch-size"? see herald relay -h)`},
		{"OneDash", []string{"relay", "-batchsize", "10"}, `herald: unknown flag --batchsize (did you mean "--batch-size"? see herald relay -h)`},
		{"OneDashNameEqualsValue", []string{"relay", "-batchsize=10"}, `herald: unknown flag --batchsize (did you mean "--batch-size"? see herald relay -h)`},
		{"Swapped", []string{"status", "--jsno"}, `herald: unknown flag --jsno (did you mean "--json"? see herald status -h)`},
		{"UpperCase", []string{"dead", "list", "--LIMIT", "5"}, `herald: unknown flag --LIMIT (did you mean "--limit"? see herald dead list -h)`},
		{"OnlyThisCommandsFlags", []string{"status", "--batch-size", "10"}, "herald: unknown flag --batch-size (see herald status -h)"},
		{"NothingClose", []string{"status", "--nope"}, "herald: unknown flag --nope (see herald status -h)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, tc.args...)
			require.Equal(t, exitUsage, r.code, r)
			require.Equal(t, tc.want+"\n", r.stderr)
		})
	}
}

// relayAdmin serves /destinations as a running relay's admin server does.
func relayAdmin(t *testing.T, ds ...destinationJSON) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/destinations" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(destinationsJSON{Destinations: ds})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A destination nobody knows is most likely a typo, which would pause
// nothing: it is refused, with the destinations known and where that list
// comes from, unless --force pauses it ahead of time.
func TestPauseRefusesAnUnknownDestination(t *testing.T) {
	t.Parallel()
	d := setup(t)

	t.Run("WithoutARelayTheDatabaseKnowsEarlierPauses", func(t *testing.T) {
		r := d.cli(t, "pause", "--destination", "nosuch")
		require.Equal(t, exitUsage, r.code, r)
		require.Equal(t, `herald: --destination: "nosuch" is not a known destination (no destination was paused before on this table); `+
			`herald pause cannot see a relay's --destination flags: check against a running relay with --relay-admin URL, `+
			"or pause it ahead of time with --force\n", r.stderr)
		require.Empty(t, r.stdout)
		r = d.cli(t, "status", "--json")
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, `"paused": []`, "nothing was paused")

		r = d.cli(t, "pause", "--destination", "kafka", "--force")
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, `paused destination "kafka"`)
		r = d.cli(t, "resume", "--destination", "kafka")
		require.Equal(t, 0, r.code, r)

		r = d.cli(t, "pause", "--destination", "kafak")
		require.Equal(t, exitUsage, r.code, r)
		require.Contains(t, r.stderr, `"kafak" is not a known destination (did you mean "kafka"? destinations paused before on this table: "kafka")`)
		r = d.cli(t, "pause", "--destination", "kafka")
		require.Equal(t, 0, r.code, "paused before, even if resumed since: %v", r)
		require.Equal(t, 0, d.cli(t, "resume", "--destination", "kafka").code)
		r = d.cli(t, "pause", "--topic", "nosuch")
		require.Equal(t, 0, r.code, "a topic is paused before it has events, as ever: %v", r)
		require.Equal(t, 0, d.cli(t, "resume", "--topic", "nosuch").code)
	})

	t.Run("ARunningRelayNamesItsDestinations", func(t *testing.T) {
		admin := relayAdmin(t, destinationJSON{Name: "default", Breaker: "closed"}, destinationJSON{Name: "audit", Breaker: "closed"})
		r := d.cli(t, "pause", "--destination", "nosuch", "--relay-admin", admin)
		require.Equal(t, exitUsage, r.code, r)
		require.Equal(t, `herald: --destination: the relay at `+admin+` has no destination "nosuch" (it has "default", "audit"); `+
			"to pause it ahead of a relay that will have it, add --force\n", r.stderr)
		r = d.cli(t, "pause", "--destination", "kafka", "--relay-admin", admin)
		require.Equal(t, exitUsage, r.code, "the relay is asked, not the earlier pauses: %v", r)
		r = cli(t, map[string]string{"HERALD_RELAY_ADMIN": admin}, append([]string{"pause", "--destination", "audti"}, d.flags...)...)
		require.Equal(t, exitUsage, r.code, r)
		require.Contains(t, r.stderr, `has no destination "audti" (did you mean "audit"? it has "default", "audit")`)

		r = d.cli(t, "pause", "--destination", "audit", "--relay-admin", admin)
		require.Equal(t, 0, r.code, r)
		require.Equal(t, 0, d.cli(t, "resume", "--destination", "audit").code)
		r = d.cli(t, "pause", "--destination", "next", "--relay-admin", admin, "--force")
		require.Equal(t, 0, r.code, r)
		require.Equal(t, 0, d.cli(t, "resume", "--destination", "next").code)

		r = d.cli(t, "pause", "--destination", "audit", "--relay-admin", "http://"+freeAddr(t))
		require.Equal(t, exitFailed, r.code, r)
		require.Contains(t, r.stderr, "herald: --relay-admin: cannot reach the relay's admin server")
		require.Contains(t, r.stderr, "(to pause without checking the destination, add --force)")
	})
}

// herald status --relay-admin shows what the relay answered: its
// destinations even when the table is empty, and for a paused destination
// the relay does not have, that it routes nothing there, instead of "?" and
// a hint to add the flag it was given.
func TestStatusShowsWhatTheRelayAdminSaid(t *testing.T) {
	t.Parallel()
	d := setup(t)
	require.Equal(t, 0, d.cli(t, "pause", "--destination", "kafka", "--force").code)
	require.Equal(t, 0, d.cli(t, "pause", "--destination", "audit", "--force").code)
	three := int64(3)
	admin := relayAdmin(t, destinationJSON{Name: "default", Breaker: "closed"},
		destinationJSON{Name: "audit", Breaker: "open", Failures: 4, Paused: true, Waiting: &three})

	r := d.cli(t, "status", "--relay-admin", admin)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "no rows")
	require.Regexp(t, `(?m)^DESTINATION\s+BREAKER\s+IN FLIGHT\s+FAILURES IN A ROW\n(default|audit)\s`, r.stdout, "an empty table still shows the relay's destinations")
	require.Regexp(t, `(?m)^audit\s+open\s+0\s+4$`, r.stdout)
	require.Regexp(t, `(?m)^destination\s+audit\s+3\s`, r.stdout)
	require.Regexp(t, `(?m)^destination\s+kafka\s+-\s`, r.stdout)
	require.Contains(t, r.stdout, `-: not a destination of the relay at `+admin+` (it has "default", "audit"), which routes no events to it`)
	require.NotContains(t, r.stdout, "add --relay-admin")
	require.NotContains(t, r.stdout, "?")

	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders', 'a', 'x')`)
	r = d.cli(t, "status", "--relay-admin", admin)
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^destination\s+kafka\s+-\s`, r.stdout)
	require.NotContains(t, r.stdout, "add --relay-admin")

	starting := relayAdmin(t) // a relay still opening its destinations
	r = d.cli(t, "status", "--relay-admin", starting)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "the relay at "+starting+" has no destinations open yet\n")
	require.Regexp(t, `(?m)^destination\s+kafka\s+\?\s`, r.stdout)
	require.Contains(t, r.stdout, "?: the relay at "+starting+" cannot count them yet: it has no destinations open\n")
	require.NotContains(t, r.stdout, "add --relay-admin")

	r = d.cli(t, "status")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^destination\s+kafka\s+\?\s`, r.stdout, "without the relay nobody knows")
	require.Contains(t, r.stdout, "a destination's waiting events: add --relay-admin URL")
}

// --resume is asked for when a discard would let waiting events go on;
// when nothing waits behind the parked key, discarding its dead event and
// unparking it are the same thing, and no --resume is needed.
func TestDeadDiscardOfAParkedKeyWithNothingWaitingNeedsNoResume(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (id, topic, key, payload, state, dead_at, last_error, parked) VALUES
		('11111111-1111-4111-8111-111111111111', 'orders', 'k1', 'x', 'dead', now(), 'poison', true),
		('33333333-3333-4333-8333-333333333333', 'orders', 'k3', 'x', 'dead', now(), 'poison', true)`)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders', 'k3', 'x')`)

	r := d.cli(t, "keys", "blocked")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `orders\s+k1\s+11111111-1111-4111-8111-111111111111\s+0\s`, r.stdout, "parked, nothing waiting")

	r = d.cli(t, "dead", "discard", "--all")
	require.Equal(t, exitFailed, r.code, r)
	require.Contains(t, r.stderr, `holds back key "k3" of topic "orders" (1 event waiting); nothing was discarded`)
	require.NotContains(t, r.stderr, "k1")

	r = d.cli(t, "dead", "discard", "11111111-1111-4111-8111-111111111111")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "discarded 1 dead event\n", r.stdout)
	r = d.cli(t, "keys", "blocked")
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout, "k1")
	require.Contains(t, r.stdout, "k3", "the key with an event waiting stays parked")
}

// A dry run without destinations says that it counted by topic only,
// instead of a DESTINATION column of "-" (or of an unchecked --to).
func TestReplayDryRunWithoutADestinationSaysSo(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.published(t, time.Hour, [3]string{"orders.placed", "k1", "A"}, [3]string{"orders.placed", "k2", "A"}, [3]string{"billing", "", "B"})
	const note = "no destination given (--publisher or --destination): counted by topic only, not by destination; a replay that publishes needs one\n"

	r := d.cli(t, "replay", "--all", "--dry-run")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `^would replay 3 events \(dry run: nothing was published\)\n`+regexp.QuoteMeta(note)+
		`TOPIC\s+EVENTS\nbilling\s+1\norders\.placed\s+2\n$`, r.stdout)

	r = d.cli(t, "replay", "--all", "--dry-run", "--to", "audit")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `counted by topic only, not by destination; --to "audit" is not checked; a replay that publishes needs one`)
	require.NotContains(t, r.stdout, "DESTINATION")

	r = d.cli(t, "replay", "--topic", "nothing", "--dry-run")
	require.Equal(t, 0, r.code, r)
	require.Equal(t, "would replay 0 events (dry run: nothing was published)\n"+note+noneToReplay+"\n", r.stdout)

	r = d.cli(t, "replay", "--all", "--dry-run", "--publisher", "nats://127.0.0.1:1")
	require.Equal(t, 0, r.code, r)
	require.NotContains(t, r.stdout, "no destination given")
	require.Regexp(t, `TOPIC\s+DESTINATION\s+EVENTS\nbilling\s+default\s+1\norders\.placed\s+default\s+2\n$`, r.stdout)
}

// An emulator takes any project name (gcloud's examples use "p"), so with
// PUBSUB_EMULATOR_HOST or emulator= only Google Cloud's own rule is
// dropped; without one, the refusal says how to use a short name.
func TestPubSubProjectNamesForTheEmulator(t *testing.T) {
	t.Parallel()
	parse := func(raw, env string) error {
		inv := &invocation{stderr: &redactor{w: io.Discard}, flags: newFlagSet("relay"), getenv: func(name string) (string, bool) {
			return env, name == pubsubEmulatorEnv && env != ""
		}}
		_, err := parseEndpoint(inv, "--publisher", "default", raw)
		return err
	}
	for _, tc := range []struct {
		url, env, err string
	}{
		{"pubsub://my-project", "", ""},
		{"pubsub://p", "localhost:8085", ""},
		{"pubsub://test-project", "localhost:8085", ""},
		{"pubsub://P_1", "localhost:8085", ""},
		{"pubsub://p?emulator=localhost:8085", "", ""},
		{"pubsub://p", "", `--publisher: "p" is not a Google Cloud project ID (6 to 30 lower-case letters, digits and hyphens, starting with a letter); ` +
			"an emulator takes any name: set PUBSUB_EMULATOR_HOST or add ?emulator=HOST:PORT"},
		{"pubsub://My_Project", "", `"My_Project" is not a Google Cloud project ID`},
		{"pubsub://p?emulator=localhost", "", `emulator="localhost" is not HOST:PORT`},
		{"pubsub://p:8085", "localhost:8085", "pubsub://PROJECT takes no port"},
	} {
		err := parse(tc.url, tc.env)
		if tc.err == "" {
			require.NoError(t, err, "%s with %s=%q", tc.url, pubsubEmulatorEnv, tc.env)
			continue
		}
		require.ErrorContains(t, err, tc.err, "%s with %s=%q", tc.url, pubsubEmulatorEnv, tc.env)
	}

	// The daemon reads the variable from its environment.
	r := cli(t, nil, "replay", "--all", "--dry-run", "--db", "postgres://127.0.0.1:1/db", "--publisher", "pubsub://p")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "an emulator takes any name: set PUBSUB_EMULATOR_HOST")
	d := setup(t)
	r = cli(t, map[string]string{pubsubEmulatorEnv: "127.0.0.1:8085"}, append([]string{"replay", "--all", "--dry-run", "--publisher", "pubsub://p"}, d.flags...)...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "would replay 0 events")
}
