// Package bench is the `herald-lab bench` command: it measures what the design
// brief promises on the machine it runs on, against a real PostgreSQL and an
// embedded NATS JetStream server it starts itself.
//
//   - producers: producer transactions per second with and without an
//     outbox row, by a hand-written INSERT and by heraldpg's WriteTx, and
//     with pg_notify in the transaction to show the cost the design avoids;
//   - drain: how fast a relay, or --relays N relays together, drains a
//     backlog, to JetStream and to a publisher that discards; on
//     PostgreSQL, or with --db mysql:// on MySQL or MariaDB (heraldmysql);
//   - latency: commit-to-receive latency at a fixed event rate.
//
// Every run works in a schema of its own (on MySQL, a database of its own),
// dropped at the end.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/herald-outbox/herald"
)

// defaultDSN is the database used when neither --db nor HERALD_DB is set.
const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Targets from the design brief, printed next to each figure.
const (
	targetWriteTxRatio    = 0.95  // WriteTx within 5% of a hand-written INSERT
	targetDrainJetStream  = 25000 // events/s
	targetDrainDiscard    = 50000 // events/s
	targetLatencyP99Milli = 25.0  // ms
)

type options struct {
	db           string
	keep         bool
	json         bool
	producers    int
	duration     time.Duration
	rounds       int
	events       int
	keys         int
	batchSize    int
	maxInFlight  int
	rate         int
	pollInterval time.Duration
	unordered    bool
	// bothOrderings drains with Herald's relay ordered and unordered in
	// each round (--ordering both); unordered is then false.
	bothOrderings bool
	maxPerKey     int
	to            string
	payloadBytes  int
	ceiling       bool
	maxBytes      int64  // relay MaxInFlightBytes; 0 is its default
	deleteOnPub   bool   // relay DeleteOnPublish
	claimRows     bool   // heraldpg ClaimRows
	claimConc     int    // relay ClaimConcurrency; 0 is its default
	natsAtomic    bool   // heraldnats AtomicBatches, on streams with allow_atomic
	relays        int    // Herald's relays draining together
	cdc           bool   // also (drain) or instead (latency) run the change-data-capture relay
	cpuProfile    string // directory for a CPU profile of each drain
	// fairness: heraldpg FairBy, the backlog, its keys, the trickle's
	// tenants and its rate
	fairBy                        string
	backlog, backlogKeys, tenants int
	trickleRate                   int
}

const usage = `usage: herald-lab bench [producers|drain|latency|fairness|all] [flags]

Benchmarks Herald against PostgreSQL and an embedded NATS JetStream server.
Subcommands (default all):
  producers  producer transactions/s: business insert alone, + hand-written
             outbox INSERT, + heraldpg WriteTx, + INSERT and pg_notify
  drain      relay drain rate of a backlog, to JetStream and to a discard publisher
  latency    commit-to-receive latency at a fixed rate through JetStream
  fairness   one tenant's backlog beside a trickle of other tenants' events,
             through JetStream: the trickle's p99 commit-to-PubAck with
             fairness on (heraldpg FairBy) against its p99 with no
             backlog, and the backlog's drain rate with fairness on
             against off, in rounds that rotate the three runs (not in all)

Flags:
  --db DSN               PostgreSQL URL (default $HERALD_DB, else
                         postgres://postgres@127.0.0.1:5432/test?sslmode=disable),
                         or MySQL 8 / MariaDB 10.6+ as
                         mysql://user:password@host:3306/dbname (drain only;
                         the run creates and drops a database of its own)
  --keep                 keep the benchmark's schema instead of dropping it
  --json                 print one JSON object of all results on stdout
                         (the human-readable lines then go to stderr)
  --producers N          concurrent producers (producers) (default 16)
  --duration D           measuring time per shape (producers) and of the
                         latency run (default 10s)
  --ceiling              also drain with the ceiling, an unsafe relay that
                         claims and marks a batch published in one statement
                         (on MySQL, one transaction of a locking read and an
                         UPDATE), and on PostgreSQL with the minimal ceiling,
                         the same on a hand-written six-column outbox table
                         with one partial index, interleaved with Herald's
                         relay, and report Herald's rate as a share of each
                         (drain) (default true)
  --rounds N             rounds over the producer shapes, each in a rotated
                         order, of each drain, and of the latency run, whose
                         percentiles are then given as median and range
                         (default 1)
  --events N             backlog size (drain) (default 100000)
  --keys N               distinct keys (drain) (default 1000)
  --batch-size N         relay batch size (default 1000)
  --max-in-flight N      relay batches in flight (default 4)
  --ordering MODE        ordered (one claimer per key, in commit order),
                         unordered (claims by age), or both: Herald's relay
                         both ways, interleaved in each round, and the
                         ordered rate as a share of the unordered (drain)
                         (default ordered)
  --max-per-key N        events of one key per claim, 0 = batch size (drain)
  --payload-bytes N      each event's payload size, 100 to 1048576 (drain)
                         (default 200)
  --max-in-flight-bytes N
                         relay bound on claimed payload bytes, 0 = the relay's
                         default (64 MiB), -1 = no bound (drain)
  --claim-concurrency N  relay claims at once, 0 = the relay's default (drain)
  --relays N             Herald's relays draining the backlog together, 1 to
                         64, each with its own pool and owner name, as that
                         many relay processes would; they share the
                         destination's client. The ceiling is unchanged
                         (drain) (default 1)
  --nats-atomic          Herald's relay sends to JetStream in atomic batches
                         (heraldnats AtomicBatches), the streams created with
                         allow_atomic; the ceiling is unchanged (drain)
  --cdc                  also run Herald's change-data-capture relay (heraldcdc:
                         a publication and a logical replication slot of the
                         run's own, made and dropped every round; inserts
                         streamed), a third system beside Herald's polling
                         relay and the ceiling (drain); run the latency with
                         it instead of polling (latency); add WriteTx on a
                         streamed table and with EmitMessages, no row
                         (producers). PostgreSQL with wal_level = logical
                         and a role with REPLICATION
  --delete-on-publish    the relay deletes each row once the broker confirms it
                         instead of keeping it as published (drain, latency)
  --claim-rows           PostgreSQL: the relay's ordered claims write every
                         event they take instead of leasing its key, as
                         before key leases were the default (drain, latency)
  --to LIST              drain destinations, comma-separated, of jetstream,
                         discard, kafka (in-process kfake), redis (127.0.0.1:6379),
                         rabbitmq (127.0.0.1:5672), mqtt (127.0.0.1:1883),
                         webhook (in-process HTTP server), sqs, sns (FIFO, SNS
                         to a queue; moto_server, an AWS emulator started on
                         loopback), pubsub (in-process pstest) (drain)
                         (default jetstream,discard)
  --cpuprofile DIR       write a CPU profile of this process (relays, ceiling
                         and embedded NATS server) over each drain into DIR,
                         named after the system, the destination and the
                         drain's number (drain)
  --rate N               events/s written (latency) (default 1000); max:
                         --producers goroutines commit as fast as the
                         database takes them for --duration, and the run
                         says whether the relay kept up (its backlog when
                         the producers stop, and how long the tail took)
  --poll-interval D      relay poll interval (latency) (default 5ms)
  --fair-by KEY          header:tenant or topic: how the tenants are told
                         apart (fairness) (default header:tenant)
  --backlog N            the backlog tenant's events (fairness) (default 1000000)
  --backlog-keys N       the keys they are spread over (fairness) (default 100000)
  --tenants N            the other tenants (fairness) (default 10)
  --trickle-rate N       their events/s, all together (fairness) (default 100);
                         the run without a backlog lasts --duration
`

var errHelp = errors.New("help requested")

// rateMax is options.rate for --rate max: the producers commit as fast as
// they can.
const rateMax = 0

// maxRelays bounds --relays: each relay holds a pool of --max-in-flight+4
// connections.
const maxRelays = 64

func parseArgs(args []string) (options, string, error) {
	var o options
	fs := flag.NewFlagSet("herald-lab bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.db, "db", "", "")
	fs.BoolVar(&o.keep, "keep", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.IntVar(&o.producers, "producers", 16, "")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "")
	fs.IntVar(&o.rounds, "rounds", 1, "")
	fs.IntVar(&o.events, "events", 100000, "")
	fs.IntVar(&o.keys, "keys", 1000, "")
	fs.IntVar(&o.batchSize, "batch-size", 1000, "")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 4, "")
	rate := fs.String("rate", "1000", "")
	fs.DurationVar(&o.pollInterval, "poll-interval", 5*time.Millisecond, "")
	ordering := fs.String("ordering", "ordered", "")
	fs.IntVar(&o.maxPerKey, "max-per-key", 0, "")
	fs.StringVar(&o.to, "to", "jetstream,discard", "")
	fs.IntVar(&o.payloadBytes, "payload-bytes", payloadSize, "")
	fs.BoolVar(&o.ceiling, "ceiling", true, "")
	fs.Int64Var(&o.maxBytes, "max-in-flight-bytes", 0, "")
	fs.BoolVar(&o.deleteOnPub, "delete-on-publish", false, "")
	fs.BoolVar(&o.claimRows, "claim-rows", false, "")
	fs.IntVar(&o.claimConc, "claim-concurrency", 0, "")
	fs.BoolVar(&o.natsAtomic, "nats-atomic", false, "")
	fs.IntVar(&o.relays, "relays", 1, "")
	fs.BoolVar(&o.cdc, "cdc", false, "")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "")
	fs.StringVar(&o.fairBy, "fair-by", "header:tenant", "")
	fs.IntVar(&o.backlog, "backlog", 1000000, "")
	fs.IntVar(&o.backlogKeys, "backlog-keys", 100000, "")
	fs.IntVar(&o.tenants, "tenants", 10, "")
	fs.IntVar(&o.trickleRate, "trickle-rate", 100, "")

	parse := func(a []string) error {
		err := fs.Parse(a)
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return err
	}
	if err := parse(args); err != nil {
		return o, "", err
	}
	sub := "all"
	if rest := fs.Args(); len(rest) > 0 {
		sub = rest[0]
		if sub == "help" {
			return o, "", errHelp
		}
		if err := parse(rest[1:]); err != nil {
			return o, "", err
		}
		if fs.NArg() > 0 {
			return o, "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
		}
	}
	if *rate == "max" {
		o.rate = rateMax
	} else if n, err := strconv.Atoi(*rate); err != nil || n < 1 {
		return o, "", fmt.Errorf("--rate: %q is not a number of events per second of at least 1, or max", *rate)
	} else {
		o.rate = n
	}
	switch *ordering {
	case "ordered":
	case "unordered":
		o.unordered = true
	case "both":
		o.bothOrderings = true
	default:
		return o, "", fmt.Errorf("--ordering: %q is not ordered, unordered or both", *ordering)
	}
	if o.maxPerKey < 0 || o.maxPerKey > o.batchSize {
		return o, "", fmt.Errorf("--max-per-key: %d is not between 0 and the batch size %d", o.maxPerKey, o.batchSize)
	}
	if o.payloadBytes < 100 || o.payloadBytes > 1<<20 {
		return o, "", fmt.Errorf("--payload-bytes: %d is not between 100 and 1048576", o.payloadBytes)
	}
	if o.claimConc < 0 || o.claimConc > o.maxInFlight {
		return o, "", fmt.Errorf("--claim-concurrency: %d is not between 0 and --max-in-flight (%d)", o.claimConc, o.maxInFlight)
	}
	if o.relays < 1 || o.relays > maxRelays {
		return o, "", fmt.Errorf("--relays: %d is not between 1 and %d", o.relays, maxRelays)
	}
	if o.cpuProfile != "" {
		if fi, err := os.Stat(o.cpuProfile); err != nil || !fi.IsDir() {
			return o, "", fmt.Errorf("--cpuprofile: %q is not a directory", o.cpuProfile)
		}
	}
	if o.maxBytes < -1 {
		return o, "", fmt.Errorf("--max-in-flight-bytes: %d is below -1", o.maxBytes)
	}
	if _, err := sinksNamed(o.to); err != nil {
		return o, "", err
	}
	switch sub {
	case "producers", "drain", "latency", "fairness", "all":
	default:
		return o, "", fmt.Errorf("unknown subcommand %q: want producers, drain, latency, fairness or all", sub)
	}
	if o.fairBy != "header:tenant" && o.fairBy != "topic" {
		return o, "", fmt.Errorf("--fair-by: %q is not header:tenant or topic", o.fairBy)
	}
	for _, c := range []struct {
		name string
		v    int
		min  int
	}{
		{"producers", o.producers, 1}, {"rounds", o.rounds, 1}, {"events", o.events, 1},
		{"keys", o.keys, 1}, {"batch-size", o.batchSize, 1}, {"max-in-flight", o.maxInFlight, 1},
		{"backlog", o.backlog, 1}, {"backlog-keys", o.backlogKeys, 1}, {"tenants", o.tenants, 1}, {"trickle-rate", o.trickleRate, 1},
	} {
		if c.v < c.min {
			return o, "", fmt.Errorf("--%s must be at least %d, got %d", c.name, c.min, c.v)
		}
	}
	if o.duration <= 0 {
		return o, "", fmt.Errorf("--duration must be positive, got %s", o.duration)
	}
	if o.pollInterval <= 0 {
		return o, "", fmt.Errorf("--poll-interval must be positive, got %s", o.pollInterval)
	}
	if o.db == "" {
		o.db = os.Getenv("HERALD_DB")
	}
	if o.db == "" {
		o.db = defaultDSN
	}
	if isMySQL(o.db) {
		if sub != "drain" {
			return o, "", fmt.Errorf("--db mysql://: only the drain benchmark runs on MySQL: run herald-lab bench drain")
		}
		if _, err := parseMySQLURL(o.db); err != nil {
			return o, "", err
		}
		if o.cdc {
			return o, "", errors.New("--cdc: change-data-capture reads PostgreSQL's write-ahead log: not with --db mysql://")
		}
	}
	return o, sub, nil
}

// Results is everything a run measured; --json prints it.
type Results struct {
	OK        bool             `json:"ok"`
	Error     string           `json:"error,omitempty"`
	Failures  []string         `json:"failures,omitempty"`
	Machine   Machine          `json:"machine"`
	Config    Config           `json:"config"`
	Producers *ProducersResult `json:"producers,omitempty"`
	Drain     *DrainResult     `json:"drain,omitempty"`
	Latency   *LatencyResult   `json:"latency,omitempty"`
	// LatencyRounds replaces Latency with --rounds above 1.
	LatencyRounds *LatencyRounds  `json:"latency_rounds,omitempty"`
	Fairness      *FairnessResult `json:"fairness,omitempty"`
	Noise         *Noise          `json:"noise,omitempty"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	NumCPU          int    `json:"num_cpu"`
	GOOS            string `json:"goos"`
	GOARCH          string `json:"goarch"`
	GoVersion       string `json:"go_version"`
	PostgresVersion string `json:"postgres_version,omitempty"`
	MySQLVersion    string `json:"mysql_version,omitempty"` // MySQL or MariaDB (--db mysql://)
	NATSVersion     string `json:"nats_server_version,omitempty"`
}

// Config echoes the options of the run, without the DSN's password.
type Config struct {
	Subcommand      string  `json:"subcommand"`
	Database        string  `json:"database"`
	Schema          string  `json:"schema,omitempty"`
	Producers       int     `json:"producers"`
	DurationSeconds float64 `json:"duration_seconds"`
	Rounds          int     `json:"rounds"`
	Events          int     `json:"events"`
	Keys            int     `json:"keys"`
	BatchSize       int     `json:"batch_size"`
	MaxInFlight     int     `json:"max_in_flight"`
	Rate            int     `json:"rate"`
	PollIntervalMS  float64 `json:"poll_interval_ms"`
	Relays          int     `json:"relays"`
}

// Main runs `herald-lab bench` with the arguments after "bench". It returns the
// exit code: 0 when every benchmark ran (whether or not it met its target),
// 1 on an error or a failed verification, 2 on bad arguments.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, sub, err := parseArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "herald-lab bench: %s (see herald-lab bench -h)\n", herald.Scrub(err.Error()))
		return 2
	}
	out := stdout
	if o.json {
		out = stderr
	}
	res := &Results{
		Machine: Machine{
			NumCPU: runtime.NumCPU(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, GoVersion: runtime.Version(),
		},
		Config: Config{
			Subcommand: sub, Database: describeDSN(o.db), Producers: o.producers,
			DurationSeconds: o.duration.Seconds(), Rounds: o.rounds, Events: o.events, Keys: o.keys,
			BatchSize: o.batchSize, MaxInFlight: o.maxInFlight, Rate: o.rate,
			PollIntervalMS: ms(o.pollInterval), Relays: o.relays,
		},
	}
	err = run(ctx, o, sub, out, stderr, res)
	if err != nil {
		res.Error = herald.Scrub(err.Error())
		fmt.Fprintf(stderr, "herald-lab bench: error: %s\n", res.Error)
	}
	for _, f := range res.Failures {
		fmt.Fprintf(stderr, "herald-lab bench: verification failed: %s\n", f)
	}
	res.OK = err == nil && len(res.Failures) == 0
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "herald-lab bench: writing JSON: %v\n", err)
			return 1
		}
	}
	if !res.OK {
		return 1
	}
	return 0
}

func run(ctx context.Context, o options, sub string, out, logOut io.Writer, res *Results) (err error) {
	// The relay and the publisher log warnings and errors only: a clean run
	// prints nothing from them.
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e, err := setup(ctx, o, log)
	if e != nil {
		defer func() {
			if cerr := e.close(out); cerr != nil && err == nil {
				err = cerr
			}
		}()
	}
	if err != nil {
		return err
	}
	if o.cdc {
		if err := e.checkLogicalWAL(ctx); err != nil {
			return err
		}
	}
	res.Machine.PostgresVersion = e.pgVersion
	server := "PostgreSQL " + e.pgVersion
	if e.my != nil {
		res.Machine.MySQLVersion = e.my.version
		server = "MySQL " + e.my.version
	}
	res.Config.Schema = e.schema
	sampler := startNoise(ctx, e)
	defer func() {
		n := sampler.stop()
		res.Noise = &n
		fmt.Fprintf(out, "\nnoise: other processes used %s of the CPU, steal %s, up to %d other active %s sessions; load average %.2f at start",
			pct(n.OtherCPUPct), pct(n.CPUStealPct), n.OtherPGSessionsMax, e.databaseName(), n.LoadAvg1mAtStart)
		if n.Suspect {
			fmt.Fprint(out, ": the machine was not quiet, figures may be low")
		}
		fmt.Fprintln(out)
	}()
	wantNATS := sub == "drain" || sub == "latency" || sub == "fairness" || sub == "all"
	if wantNATS {
		if err := e.startNATS(ctx); err != nil {
			return err
		}
		res.Machine.NATSVersion = e.nats.version
	}
	fmt.Fprintf(out, "herald-lab bench: %s/%s, %d CPUs, %s, %s", res.Machine.GOOS, res.Machine.GOARCH,
		res.Machine.NumCPU, res.Machine.GoVersion, server)
	if wantNATS {
		fmt.Fprintf(out, ", nats-server %s (embedded)", res.Machine.NATSVersion)
	}
	if e.my != nil {
		fmt.Fprintf(out, "\ndatabase %s, the run's database %s\n", res.Config.Database, e.schema)
	} else {
		fmt.Fprintf(out, "\ndatabase %s, schema %s\n", res.Config.Database, e.schema)
	}

	if sub == "producers" || sub == "all" {
		r, err := runProducers(ctx, e, out)
		res.Producers = r
		if err != nil {
			return fmt.Errorf("producers: %w", err)
		}
	}
	if sub == "drain" || sub == "all" {
		r, failures, err := runDrain(ctx, e, out)
		res.Drain = r
		res.Failures = append(res.Failures, failures...)
		if err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	if sub == "fairness" {
		r, failures, err := runFairness(ctx, e, out)
		res.Fairness = r
		res.Failures = append(res.Failures, failures...)
		if err != nil {
			return fmt.Errorf("fairness: %w", err)
		}
		return nil
	}
	if sub == "latency" || sub == "all" {
		if e.o.rounds > 1 {
			r, failures, err := runLatencyRounds(ctx, e, out)
			res.LatencyRounds = r
			res.Failures = append(res.Failures, failures...)
			if err != nil {
				return fmt.Errorf("latency: %w", err)
			}
			return nil
		}
		r, failures, err := runLatency(ctx, e, out)
		res.Latency = r
		res.Failures = append(res.Failures, failures...)
		if err != nil {
			return fmt.Errorf("latency: %w", err)
		}
	}
	return nil
}

// verdict is what is printed next to a figure with a target.
func verdict(met bool) string {
	if met {
		return "target met"
	}
	return "target MISSED"
}

// pct prints a percentage, or "n/a" for -1.
func pct(v float64) string {
	if v < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", v)
}

func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(v float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	if v < 0 {
		return -float64(int64(-v*p+0.5)) / p
	}
	return float64(int64(v*p+0.5)) / p
}

// fmtRate prints a rate rounded, with thousands separated: 31,250.
func fmtRate(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
