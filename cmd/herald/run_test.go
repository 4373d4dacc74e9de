package main

import (
	"bytes"
	"context"
	"flag"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) {
	runChildIfAsked()
	testenv.Main(m)
}

// result is what one run of the program printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string { return "stdout:\n" + r.stdout + "\nstderr:\n" + r.stderr }

// cli runs the program with args and an environment of its own, so that
// tests need no real environment variables and may run in parallel.
func cli(t *testing.T, environ map[string]string, args ...string) result {
	t.Helper()
	return cliCtx(context.Background(), environ, nil, args...)
}

func cliCtx(ctx context.Context, environ map[string]string, signals <-chan os.Signal, args ...string) result {
	var stdout, stderr bytes.Buffer
	getenv := func(name string) (string, bool) { v, ok := environ[name]; return v, ok }
	code := runWith(ctx, system{getenv: getenv, signals: signals}, args, &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

func TestBadInputGivesOneClearLine(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-Secret"
	db := "postgres://127.0.0.1:1/db"
	pub := "nats://127.0.0.1:1"
	relay := func(args ...string) []string {
		return append([]string{"relay", "--db", db, "--publisher", pub}, args...)
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		args    []string
		code    int
		message string
	}{
		{"UnknownCommand", nil, []string{"frobnicate"}, 2, `herald: unknown command "frobnicate" (see herald help)`},
		{"PrintSQLFromAnUnknownVersion", nil, []string{"migrate", "--print-sql", "--from", "99", "--db", "postgres://u:" + secret + "@127.0.0.1:1/db"}, 2,
			"herald: --from: 99 is not a schema version this herald knows"},
		{"FromWithoutPrintSQL", nil, []string{"migrate", "--from", "2", "--db", "postgres://127.0.0.1:1/db"}, 2,
			"herald: --from goes with --print-sql"},
		{"WebhookWithoutSecret", nil, relay("--destination", "hook=https://hooks.example/x", "--route", "a=hook"), 2,
			"herald: destination hook: HERALD_WEBHOOK_SECRET (or HERALD_DESTINATION_HOOK_SECRET) is required: the whsec_... secret every webhook request is signed with"},
		{"WebhookSecretWithoutPrefix", map[string]string{"HERALD_WEBHOOK_SECRET": "plain"}, relay("--destination", "hook=https://hooks.example/x", "--route", "a=hook"), 2,
			`herald: destination hook: HERALD_WEBHOOK_SECRET must start with "whsec_" (a Standard Webhooks secret)`},
		{"AMQPExchangeTooLong", nil, []string{"relay", "--db", db, "--publisher", "amqp://u:" + secret + "@127.0.0.1:1/?exchange=" + strings.Repeat("e", 256)}, 2,
			"herald: --publisher: exchange= is 256 bytes; AMQP allows 255"},
		{"MistypedCommand", nil, []string{"stauts"}, 2, `herald: unknown command "stauts" (did you mean "status"? see herald help)`},
		{"MistypedRelay", nil, []string{"relya"}, 2, `herald: unknown command "relya" (did you mean "relay"? see herald help)`},
		{"MistypedDeadSubcommand", nil, []string{"dead", "lsit"}, 2, `unknown dead subcommand "lsit" (did you mean "list"? use list`},
		{"UnknownDeadSubcommand", nil, []string{"dead", "bury"}, 2, `unknown dead subcommand "bury"`},
		{"UnknownKeysSubcommand", nil, []string{"keys", "unlock"}, 2, `unknown keys subcommand "unlock"`},
		{"KeysWithoutSubcommand", nil, []string{"keys"}, 2, "keys needs a subcommand: blocked"},
		{"BadOrdering", nil, relay("--ordering", "sorted"), 2, `--ordering: "sorted" is not ordered or unordered`},
		{"BadOrderingFromEnv", map[string]string{"HERALD_ORDERING": "random"}, relay(), 2, `HERALD_ORDERING: "random" is not ordered or unordered`},
		{"EmptyUnorderedTopic", nil, relay("--unordered-topics", "a,,b"), 2, `--unordered-topics: "a,,b" is not a list of topics`},
		{"TopicListsNeedOrdered", nil, relay("--ordering", "unordered", "--skip-dead-topics", "a"), 2, "only apply with --ordering ordered"},
		{"DestinationWithoutName", nil, []string{"relay", "--db", db, "--destination", "nats://127.0.0.1:1"}, 2, `--destination: "nats://127.0.0.1:1" is not NAME=URL`},
		{"DestinationBadName", nil, []string{"relay", "--db", db, "--destination", "Main=nats://127.0.0.1:1"}, 2, `--destination: name "Main" must match`},
		{"DestinationTwice", nil, []string{"relay", "--db", db, "--destination", "a=nats://127.0.0.1:1", "--destination", "a=redis://127.0.0.1:1"}, 2, `destination "a" is given twice`},
		{"DestinationUnknownScheme", nil, []string{"relay", "--db", db, "--destination", "a=stomp://u:" + secret + "@127.0.0.1:1"}, 2, `--destination a: scheme "stomp" is not supported`},
		{"DestinationMixedSchemes", nil, []string{"relay", "--db", db, "--destination", "a=nats://127.0.0.1:1,kafka://127.0.0.1:2"}, 2, "one destination takes URLs of one broker"},
		{"RouteToUnknownDestination", nil, relay("--route", "orders.*=nope"), 2, `--route: "orders.*=nope" routes to "nope", which no --destination names`},
		{"RouteWithoutName", nil, relay("--route", "orders"), 2, `--route: "orders" is not TOPIC=NAME`},
		{"RouteBadPattern", nil, relay("--route", "a.>.b=default"), 2, "> may only end a pattern"},
		{"RoutesFromEnv", map[string]string{"HERALD_ROUTE": "orders.*=default billing=x"}, relay(), 2, `HERALD_ROUTE: "billing=x" routes to "x"`},
		{"DefaultUnknown", nil, relay("--default-destination", "x"), 2, `--default-destination: "x" is not a destination`},
		{"AdminAddrWithoutPort", nil, relay("--admin-addr", "localhost"), 2, `--admin-addr: "localhost" is not host:port`},
		{"AdminTokenTooShort", map[string]string{"HERALD_ADMIN_TOKEN": "tiny-tok"}, relay("--admin-addr", ":0"), 2, "HERALD_ADMIN_TOKEN is shorter than 16 characters"},
		{"MaxPerKeyAboveBatch", nil, relay("--max-per-key", "5000"), 2, "--max-per-key: 5000 is not between 0 and --batch-size (1000)"},
		{"ClaimConcurrencyAboveMaxInFlight", nil, relay("--claim-concurrency", "5"), 2, "--claim-concurrency: 5 is not between 0 and --max-in-flight (4)"},
		{"MaxInFlightBytesZero", nil, relay("--max-in-flight-bytes", "0"), 2, "--max-in-flight-bytes: 0 is not positive or -1 (no bound)"},
		{"MaxInFlightBytesNegative", map[string]string{"HERALD_MAX_IN_FLIGHT_BYTES": "-2"}, relay(), 2, "HERALD_MAX_IN_FLIGHT_BYTES: -2 is not positive or -1 (no bound)"},
		{"NATSMaxPendingBytesZero", nil, relay("--nats-max-pending-bytes", "0"), 2, "--nats-max-pending-bytes: 0 is not positive"},
		{"UnknownFlag", nil, []string{"status", "--nope"}, 2, "herald: unknown flag --nope"},
		{"BoolFlagWithValue", nil, []string{"status", "--json=maybe"}, 2, "herald: --json takes no value"},
		{"FlagWithoutValue", nil, []string{"status", "--db"}, 2, "herald: --db needs a value"},
		{"MissingDB", nil, []string{"status"}, 2, "herald: --db (or HERALD_DB) is required"},
		{"WrongDSNScheme", nil, []string{"status", "--db", "oracle://root:" + secret + "@127.0.0.1:1/db"}, 2,
			`herald: --db: scheme "oracle" is not supported`},
		{"UnparseableKeywordDSN", nil, []string{"status", "--db", "host=localhost port=notaport password=" + secret}, 2,
			"herald: --db: "},
		{"UnparseableKeywordDSNQuotedPassword", nil, []string{"status", "--db", "host=localhost port=x password='" + secret + " x'"}, 2,
			"herald: --db: "},
		{"NotADSN", nil, []string{"status", "--db", "localhost:5432"}, 2,
			"herald: --db: not a postgres://, postgresql:// or mysql:// URL, a host=... user=... connection string, nor sqlite:path"},
		{"UnparseableDSNWithPassword", nil, []string{"status", "--db", "postgres://u:" + secret + "@127.0.0.1:notaport/db"}, 2,
			"herald: --db: "},
		{"UnparseableDSNWithOddPassword", nil, []string{"migrate", "--db", "postgresql://u:" + secret + "/x@h@127.0.0.1:99999/db"}, 2,
			"herald: --db: "},
		{"BadDSNFromEnvNamesTheVariable", map[string]string{"HERALD_DB": "oracle://u:" + secret + "@h/db"}, []string{"status"}, 2,
			"herald: HERALD_DB: scheme"},
		{"BadTableName", nil, []string{"status", "--db", db, "--table", "Bad-Name"}, 2, "herald: --table"},
		{"BadLogLevel", nil, []string{"status", "--db", db, "--log-level", "loud"}, 2, `herald: --log-level: "loud"`},
		{"BadBatchSize", nil, relay("--batch-size", "x"), 2, `herald: --batch-size: invalid value "x": not an integer`},
		{"ZeroBatchSize", nil, relay("--batch-size", "0"), 2, "herald: --batch-size: 0 is not positive"},
		{"BadDuration", nil, relay("--lease", "soon"), 2, `herald: --lease: invalid value "soon": not a duration`},
		{"DurationWithoutUnit", nil, relay("--poll-interval", "5"), 2, `herald: --poll-interval: invalid value "5"`},
		{"LeaseShorterThanPublishTimeout", nil, relay("--lease", "5s"), 2, "herald: --lease (5s) must exceed --publish-timeout (20s)"},
		{"BadRetention", nil, relay("--retention", "a while"), 2, "herald: --retention: invalid value"},
		{"BadEnvBatchSize", map[string]string{"HERALD_BATCH_SIZE": "lots"}, []string{"relay"}, 2,
			`herald: HERALD_BATCH_SIZE: invalid value "lots": not an integer`},
		{"BadEnvDuration", map[string]string{"HERALD_SHUTDOWN_TIMEOUT": "-"}, relay(), 2, "herald: HERALD_SHUTDOWN_TIMEOUT: invalid value"},
		{"StreamWithoutSubjects", nil, relay("--nats-create-stream", "ORDERS"), 2, "herald: --nats-create-stream needs --nats-stream-subjects"},
		{"MissingPublisher", nil, []string{"relay", "--db", db}, 2, "herald: --publisher (or HERALD_PUBLISHER) or --destination is required"},
		{"PublisherWrongScheme", nil, []string{"relay", "--db", db, "--publisher", "stomp://guest:" + secret + "@127.0.0.1:1"}, 2,
			`herald: --publisher: scheme "stomp" is not supported: use nats://, kafka://, redis://, amqp://, mqtt(s):// or http(s)://`},
		{"WebhookBadSecret", map[string]string{"HERALD_WEBHOOK_SECRET": "not-a-whsec-" + secret}, relay("--destination", "hook=http://127.0.0.1:1/x", "--route", "a=hook"), 2,
			"destination hook: "},
		{"UnparseablePublisherWithPassword", nil, []string{"relay", "--db", db, "--publisher", "nats://u:" + secret + "@127.0.0.1:port"}, 2,
			"herald: --publisher: "},
		{"PublisherPasswordWithQuote", nil, []string{"relay", "--db", db, "--publisher", `amqp://u:"` + secret + `"@127.0.0.1:1`}, 2,
			"herald: --publisher: not a URL"},
		{"PublisherPasswordWithAtAndSlash", nil, []string{"relay", "--db", db, "--publisher", "https://u:pw0rd@" + secret + "/x@127.0.0.1:1/in"}, 2,
			"herald: --publisher: the user information holds an '@', '/', '?' or '#' that is not percent-encoded"},
		{"DSNPasswordWithAt", nil, []string{"status", "--db", "postgres://u:pw0rd@" + secret + "@127.0.0.1:1/db"}, 2,
			"herald: --db: the password holds an '@' or '/' that is not percent-encoded"},
		{"MySQLWithoutDatabase", nil, []string{"status", "--db", "mysql://u:" + secret + "@127.0.0.1:1"}, 2,
			"herald: --db: mysql:// needs one database as its path"},
		{"MySQLWithoutHost", nil, []string{"status", "--db", "MySQL://u:" + secret + "@/db"}, 2,
			"herald: --db: mysql:// needs a host"},
		{"MySQLBadOption", nil, []string{"status", "--db", "mysql://u:" + secret + "@127.0.0.1:1/db?timeout=soon"}, 2,
			"herald: --db: "},
		{"MySQLPasswordWithSlash", nil, []string{"status", "--db", "mysql://u:pw0rd/" + secret + "@127.0.0.1:1/db"}, 2,
			"herald: --db: the password holds a '/', '?' or '#' that is not percent-encoded"},
		{"MySQLWithSchema", nil, []string{"status", "--db", "mysql://u:" + secret + "@127.0.0.1:1/db", "--schema", "other"}, 2,
			"herald: --schema: on MySQL the database is the schema"},
		{"MySQLBadTable", nil, []string{"status", "--db", "mysql://u:" + secret + "@127.0.0.1:1/db", "--table", "Bad-Name"}, 2,
			"herald: --table"},
		{"UnreachableMySQL", nil, []string{"status", "--db", "mysql://u:" + secret + "@127.0.0.1:1/db?timeout=5s"}, 1,
			"herald: cannot reach the database u@127.0.0.1:1/db"},
		{"PublisherTokenWithoutHost", nil, []string{"relay", "--db", db, "--publisher", "nats://" + secret + "@"}, 2,
			"herald: --publisher: nats://xxxxx@ has no host"},
		{"UnreachableDatabase", nil, []string{"status", "--db", "postgres://u:" + secret + "@127.0.0.1:1/db?connect_timeout=5"}, 1,
			"herald: cannot reach the database u@127.0.0.1:1/db"},
		{"DeadWithoutSubcommand", nil, []string{"dead"}, 2, "herald: dead needs a subcommand"},
		{"DeadRequeueWithoutSelection", nil, []string{"dead", "requeue", "--db", db}, 2, "exactly one of them"},
		{"DeadDiscardTopicAndAll", nil, []string{"dead", "discard", "--db", db, "--topic", "a", "--all"}, 2, "exactly one of them"},
		{"DeadShowTwoIDs", nil, []string{"dead", "show", "--db", db, "a", "b"}, 2, "exactly one event id"},
		{"DeadShowNotAUUID", nil, []string{"dead", "show", "--db", db, "nope"}, 2, `"nope" is not an event id`},
		{"DeadListLimit", nil, []string{"dead", "list", "--db", db, "--limit", "0"}, 2, "--limit: 0 is not between"},
		{"StatusWithArgument", nil, []string{"status", "--db", db, "extra"}, 2, `takes no arguments, got "extra"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, tc.env, tc.args...)
			require.Equal(t, tc.code, r.code, r)
			require.Contains(t, r.stderr, tc.message, r)
			require.NotContains(t, r.stdout+r.stderr, secret, "a password reached the output")
			require.Empty(t, r.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line on stderr: %q", r.stderr)
		})
	}
}

func TestHelpListsEveryCommandAndFlag(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := cli(t, nil, args...)
		require.Equal(t, 0, r.code, r)
		require.Empty(t, r.stderr)
		for _, c := range commands {
			require.Contains(t, r.stdout, "  "+c.name, "command %s", c.name)
			f := newFlagSet(c.name)
			c.setup(f)
			f.fs.VisitAll(func(fl *flag.Flag) {
				require.Regexp(t, `\n  --`+fl.Name+`[ \n]`, r.stdout, "flag --%s of %s", fl.Name, c.name)
				if env, ok := f.envOf[fl.Name]; ok {
					require.Contains(t, r.stdout, env)
				}
			})
		}
		require.Contains(t, r.stdout, "herald-lab (go run ./cmd/herald-lab demo)", "the demo and bench are pointed to")
	}

	r := cli(t, nil, "relay", "-h")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "--shutdown-timeout duration")
	require.Contains(t, r.stdout, "HERALD_SHUTDOWN_TIMEOUT")

	r = cli(t, nil, "help", "dead")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "herald dead requeue (ID... | --topic T | --all)")

	r = cli(t, nil)
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "Usage:")
}

func TestFlagsWinOverTheEnvironment(t *testing.T) {
	t.Parallel()
	// The variable alone is refused, naming the variable...
	r := cli(t, map[string]string{"HERALD_LOG_FORMAT": "yaml"}, "status", "--db", "oracle://x")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, `herald: HERALD_LOG_FORMAT: "yaml" is not text or json`)
	// ...and the flag overrides it: the run gets as far as the DSN.
	r = cli(t, map[string]string{"HERALD_LOG_FORMAT": "yaml"}, "status", "--log-format", "json", "--db", "oracle://x")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "herald: --db: scheme")
	// Selectors have no variable: HERALD_ALL cannot widen a discard.
	r = cli(t, map[string]string{"HERALD_ALL": "true", "HERALD_DB": "postgres://127.0.0.1:1/db"}, "dead", "discard")
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "exactly one of them")
}

func TestFlagsAndArgumentsInAnyOrder(t *testing.T) {
	t.Parallel()
	f := newFlagSet("dead show")
	setupDeadShow(f)
	args, err := f.parse([]string{"--db", "postgres://h/db", "0190f0a8-0000-7000-8000-000000000001", "--json"},
		func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	require.Equal(t, []string{"0190f0a8-0000-7000-8000-000000000001"}, args)
	require.Equal(t, "true", f.fs.Lookup("json").Value.String())
}

func TestRetentionFlag(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"0": 0, "forever": -1, "FOREVER": -1, "-1h": -1, "36h": 36 * time.Hour,
	} {
		f := newFlagSet("relay")
		r := addRelayFlags(f)
		_, err := f.parse([]string{"--retention", in}, func(string) (string, bool) { return "", false })
		require.NoError(t, err, in)
		require.Equal(t, want, *r.retention, in)
	}
}

func TestVersionSaysWhichHeraldAndGo(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version", "-version"} {
		res := cli(t, nil, arg)
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Regexp(t, `^herald \S+( \(\S+\))?, go1\.\d+\S* \w+/\w+\n$`, res.stdout)
		require.Contains(t, res.stdout, runtime.Version())
	}
	require.Contains(t, usage(), "version")
}

func TestDidYouMeanOnlySuggestsWhatIsClose(t *testing.T) {
	t.Parallel()
	words := topCommands()
	require.ElementsMatch(t, []string{"help", "version", "migrate", "relay", "doctor", "status", "dead", "keys", "replay", "pause", "resume", "config", "source", "backfill"}, words)
	for typed, want := range map[string]string{
		"stauts": "status", "STATUS": "status", "migarte": "migrate", "mgirate": "migrate",
		"relays": "relay", "replya": "replay", "deda": "dead", "kyes": "keys", "vresion": "version", "puase": "pause", "resmue": "resume", "suorce": "source", "cnofig": "config", "bakcfill": "backfill",
		"frobnicate": "", "x": "", "publish": "", "de": "", strings.Repeat("status", 40): "",
	} {
		got := didYouMean(typed, words...)
		if want == "" {
			require.Empty(t, got, typed)
			continue
		}
		require.Equal(t, `did you mean "`+want+`"? `, got, typed)
	}
}

func TestDeleteOnPublishFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  string
		want bool
		err  string
	}{
		{nil, "", false, ""},
		{[]string{"--delete-on-publish"}, "", true, ""},
		{[]string{"--delete-on-publish=false"}, "true", false, ""},
		{nil, "true", true, ""},
		{nil, "0", false, ""},
		{nil, "sometimes", false, `HERALD_DELETE_ON_PUBLISH: invalid value "sometimes": not true or false`},
		{[]string{"--delete-on-publish=maybe"}, "", false, "--delete-on-publish takes no value (or true/false)"},
	} {
		f := newFlagSet("relay")
		r := addRelayFlags(f)
		_, err := f.parse(tc.args, func(name string) (string, bool) {
			return tc.env, name == "HERALD_DELETE_ON_PUBLISH" && tc.env != ""
		})
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, "%v %q", tc.args, tc.env)
			continue
		}
		require.NoError(t, err, "%v %q", tc.args, tc.env)
		require.Equal(t, tc.want, *r.deleteOnPublish, "%v %q", tc.args, tc.env)
	}
}

func TestRedactorRemovesSecretsInEverySpelling(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	red := &redactor{w: &buf}
	red.add(userinfoSecrets("postgres://u:p%40ss/w@host/db", false)...)
	red.add(userinfoSecrets("nats://tok3n@host:4222", true)...)
	for _, s := range []string{"p%40ss/w", "p@ss/w", "tok3n"} {
		require.Equal(t, "x "+redacted+" y", red.scrub("x "+s+" y"))
	}
	require.Equal(t, "a; b", red.scrub("a\nb"))
	_, err := red.Write([]byte("level=WARN msg=oops url=nats://tok3n@host\n"))
	require.NoError(t, err)
	require.NotContains(t, buf.String(), "tok3n")
}

// The first signal cancels the command's context; the second aborts.
func TestSignals(t *testing.T) {
	t.Parallel()
	sigs := make(chan os.Signal, 2)
	ctx, abort, stop := watchSignals(context.Background(), sigs)
	defer stop()
	sigs <- syscall.SIGTERM
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("first signal did not cancel the context")
	}
	select {
	case <-abort:
		t.Fatal("aborted on the first signal")
	default:
	}
	sigs <- syscall.SIGINT
	select {
	case <-abort:
	case <-time.After(5 * time.Second):
		t.Fatal("second signal did not abort")
	}
}

func TestSecondSignalAbortsACommandAtOnce(t *testing.T) {
	t.Parallel()
	// A database that accepts the connection and never answers: the
	// command blocks in its connect until aborted.
	ln := listen(t)
	sigs := make(chan os.Signal, 2)
	sigs <- syscall.SIGINT
	sigs <- syscall.SIGINT
	start := time.Now()
	r := cliCtx(context.Background(), nil, sigs, "status", "--db", "postgres://u@"+ln+"/db")
	require.Less(t, time.Since(start), 5*time.Second)
	require.NotEqual(t, 0, r.code, r)
}

// listen returns the address of a server that accepts connections and
// never answers.
func listen(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func TestKeywordDSNIsParsed(t *testing.T) {
	t.Parallel()
	f := newFlagSet("status")
	d := addDBFlags(f)
	_, err := f.parse([]string{"--db", "host=db.example user=app password='p w' dbname=shop port=6543"},
		func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	var stderr bytes.Buffer
	red := &redactor{w: &stderr}
	db, err := d.parseDB(&invocation{flags: f, stderr: red}, false)
	require.NoError(t, err)
	require.Equal(t, "app@db.example:6543/shop", db.where)
	require.Equal(t, "p w", db.spec.Target().(*heraldpg.DSNConfig).Pool.ConnConfig.Password)
	require.Equal(t, "x "+redacted+" y", red.scrub("x p w y"), "the password is a secret of the run")
}
