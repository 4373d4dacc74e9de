package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/bench"
	"github.com/herald-outbox/herald/internal/testenv"
)

// testenv.Main stops the throwaway PostgreSQL and checks for leaked
// goroutines: the embedded NATS server, the relays and the pools must all
// be gone when Main returns.
func TestMain(m *testing.M) { testenv.Main(m) }

// A tiny run of every benchmark: exit code 0 and one JSON object holding
// every figure, each positive.
func TestTinyRunReportsEveryFigure(t *testing.T) {
	testenv.Long(t)
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"all", "--db", dsn, "--json",
		"--events", "2000", "--duration", "1s", "--producers", "2", "--rate", "200"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var res map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), "stdout is not one JSON object:\n%s", stdout.String())
	require.Equal(t, true, res["ok"])

	positive := func(path string) {
		t.Helper()
		var v any = res
		for _, k := range strings.Split(path, ".") {
			switch c := v.(type) {
			case map[string]any:
				v = c[k]
			case []any:
				var i int
				_, err := fmt.Sscan(k, &i)
				require.NoError(t, err, path)
				require.Less(t, i, len(c), path)
				v = c[i]
			default:
				t.Fatalf("%s: no field %q", path, k)
			}
		}
		n, ok := v.(float64)
		require.True(t, ok, "%s: want a number, got %#v", path, v)
		require.Greater(t, n, 0.0, path)
	}
	positive("machine.num_cpu")
	for i := range 4 {
		positive(fmt.Sprintf("producers.shapes.%d.tx_per_sec", i))
	}
	positive("producers.writetx_vs_insert_ratio")
	positive("producers.notify_vs_insert_ratio")
	// Two destinations, each drained by Herald's relay, the ceiling and
	// the minimal ceiling.
	for i := range 6 {
		positive(fmt.Sprintf("drain.targets.%d.events_per_sec", i))
		positive(fmt.Sprintf("drain.targets.%d.published", i))
	}
	for i := range 2 {
		positive(fmt.Sprintf("drain.vs_ceiling.%d.median", i))
		positive(fmt.Sprintf("drain.vs_minimal_ceiling.%d.median", i))
	}
	targets := res["drain"].(map[string]any)["targets"].([]any)
	var systems []string
	for _, tg := range targets {
		systems = append(systems, tg.(map[string]any)["system"].(string))
	}
	require.Equal(t, []string{"herald", "ceiling", "minimal", "herald", "ceiling", "minimal"}, systems)
	require.Equal(t, 2000.0, targets[1].(map[string]any)["stream_messages"], "the ceiling's drain is verified too")
	require.Equal(t, 2000.0, targets[2].(map[string]any)["stream_messages"], "the minimal ceiling's drain is verified too")
	for _, i := range []int{1, 2} {
		require.Equal(t, true, targets[i].(map[string]any)["verified"], "target %d", i)
	}
	positive("drain.targets.0.stream_messages")
	if runtime.GOOS == "linux" { // read from /proc, with the test's PostgreSQL on this machine
		positive("drain.targets.0.database_cpu_us_per_event")
		positive("drain.targets.0.process_cpu_us_per_event")
	}
	positive("latency.events_per_sec")
	for _, p := range []string{"p50_ms", "p90_ms", "p99_ms", "max_ms", "count"} {
		positive("latency.commit_to_receive." + p)
		positive("latency.commit_to_claim." + p)
		positive("latency.commit_to_ack." + p)
	}
	require.Equal(t, 2000.0, res["drain"].(map[string]any)["targets"].([]any)[0].(map[string]any)["stream_messages"])
	pg, _ := res["machine"].(map[string]any)["postgres_version"].(string)
	require.NotEmpty(t, pg)
	require.Contains(t, stderr.String(), "target", "the human-readable lines go to stderr with --json")
}

// --nats-atomic: the drain to JetStream in atomic batches delivers the
// whole backlog, verified, and the result says the mode.
func TestDrainWithNATSAtomicBatches(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"drain", "--db", dsn, "--json", "--to", "jetstream", "--nats-atomic",
		"--events", "2000", "--keys", "20"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	var res struct {
		OK    bool `json:"ok"`
		Drain struct {
			NATSAtomic bool                `json:"nats_atomic"`
			Targets    []bench.DrainTarget `json:"targets"`
		} `json:"drain"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	require.True(t, res.Drain.NATSAtomic)
	require.Len(t, res.Drain.Targets, 3, "Herald's relay and both ceilings")
	for _, tg := range res.Drain.Targets {
		require.True(t, tg.Verified, "%s", tg.System)
		require.NotNil(t, tg.StreamMessages)
		require.EqualValues(t, 2000, *tg.StreamMessages, "%s", tg.System)
	}
	require.Contains(t, stderr.String(), "atomic batches (--nats-atomic)")
}

// --ordering both: each round drains with Herald's relay ordered and
// unordered and with both ceilings; every drain delivers the whole backlog,
// the ordered one in each key's order, and the comparison is the ordered
// rate over the unordered one, round by round.
func TestDrainBothOrderingsComparesThem(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	profiles := t.TempDir()
	code := bench.Main(ctx, []string{"drain", "--db", dsn, "--json", "--to", "jetstream", "--ordering", "both",
		"--events", "1000", "--keys", "20", "--batch-size", "100", "--rounds", "2", "--cpuprofile", profiles}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	var res struct {
		OK    bool `json:"ok"`
		Drain struct {
			Ordering           string                  `json:"ordering"`
			Targets            []bench.DrainTarget     `json:"targets"`
			OrderedVsUnordered []bench.DrainComparison `json:"ordered_vs_unordered"`
		} `json:"drain"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	require.Equal(t, "both", res.Drain.Ordering)
	require.Len(t, res.Drain.Targets, 8, "Herald ordered, Herald unordered and both ceilings, two rounds")
	rates := map[string][]float64{}
	for _, tg := range res.Drain.Targets {
		require.True(t, tg.Verified, "%s round %d", tg.System, tg.Round)
		require.EqualValues(t, 1000, tg.Published, "%s", tg.System)
		rates[tg.System] = append(rates[tg.System], tg.EventsPerSec)
		if tg.System == "herald" {
			require.NotNil(t, tg.KeyOrder, "the ordered drain is read back in order")
			require.Zero(t, tg.KeyOrder.OutOfOrder)
		} else {
			require.Nil(t, tg.KeyOrder, "%s keeps no key order to check", tg.System)
		}
	}
	require.Len(t, rates["herald-unordered"], 2)
	require.Len(t, res.Drain.OrderedVsUnordered, 1)
	c := res.Drain.OrderedVsUnordered[0]
	require.Equal(t, "jetstream", c.Name)
	require.Len(t, c.Ratios, 2)
	for i, r := range c.Ratios {
		require.InDelta(t, rates["herald"][i]/rates["herald-unordered"][i], r, 0.001, "round %d", i+1)
	}
	require.Contains(t, stderr.String(), "jetstream: Herald ordered at")

	// --cpuprofile: one profile of each drain, named after its system.
	files, err := os.ReadDir(profiles)
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
		info, err := f.Info()
		require.NoError(t, err)
		require.Positive(t, info.Size(), f.Name())
	}
	slices.Sort(names)
	require.Len(t, names, 8, "%v", names)
	perSystem := map[string]int{}
	for _, n := range names {
		system, _, ok := strings.Cut(n, "-jetstream-")
		require.True(t, ok, n)
		if strings.HasPrefix(n, "herald-jetstream-unordered-") {
			system = "herald-unordered"
		}
		perSystem[system]++
	}
	require.Equal(t, map[string]int{"herald": 2, "herald-unordered": 2, "ceiling": 2, "minimal": 2}, perSystem, "%v", names)
}

// --rate max: the producers commit as fast as they can for the duration;
// every event they committed arrives once, and the run says what the
// relay had not caught up with when they stopped and how long the tail
// took.
func TestLatencyAtTheCommitLimit(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"latency", "--db", dsn, "--json", "--rate", "max", "--producers", "4",
		"--duration", "1s"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	var res struct {
		OK      bool                 `json:"ok"`
		Latency *bench.LatencyResult `json:"latency"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	r := res.Latency
	require.NotNil(t, r)
	require.True(t, r.AtCommitLimit)
	require.Equal(t, 4, r.Producers)
	require.Positive(t, r.Committed)
	require.Equal(t, r.Committed, r.Received, "every committed event received")
	require.Zero(t, r.Duplicates)
	require.GreaterOrEqual(t, r.BacklogAtEnd, 0)
	require.LessOrEqual(t, r.BacklogAtEnd, r.Committed)
	require.Positive(t, r.TailMS)
	require.Equal(t, r.Committed, r.CommitToReceive.Count)
	require.Contains(t, stderr.String(), "as many events as the producers commit")
	require.Contains(t, stderr.String(), "when the producers stopped")

	code = bench.Main(ctx, []string{"latency", "--db", dsn, "--rate", "fast"}, &stdout, &stderr)
	require.Equal(t, 2, code)
	require.Contains(t, stderr.String(), `--rate: "fast" is not a number of events per second of at least 1, or max`)
}

// --rounds with latency: every run is kept, and each percentile is the
// median and range of the runs' own.
func TestLatencyRoundsGiveMedianAndRange(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"latency", "--db", dsn, "--json", "--rounds", "3",
		"--duration", "500ms", "--rate", "200"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	var res struct {
		OK            bool                 `json:"ok"`
		Latency       *bench.LatencyResult `json:"latency"`
		LatencyRounds *bench.LatencyRounds `json:"latency_rounds"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	require.Nil(t, res.Latency, "one result per run, in latency_rounds")
	lr := res.LatencyRounds
	require.NotNil(t, lr)
	require.Len(t, lr.Runs, 3)
	var p99s []float64
	for _, r := range lr.Runs {
		require.Equal(t, r.Committed, r.Received, "every committed event received, in each run")
		require.Zero(t, r.Duplicates, "an earlier run's events are not this run's")
		require.Positive(t, r.CommitToReceive.P50, "received after committed")
		p99s = append(p99s, r.CommitToReceive.P99)
	}
	slices.Sort(p99s)
	require.Equal(t, p99s, slices.Sorted(slices.Values(lr.ReceiveP99.Values)), "the runs' own p99s")
	require.Equal(t, p99s[1], lr.ReceiveP99.Median)
	require.Equal(t, []float64{p99s[0], p99s[2]}, []float64{lr.ReceiveP99.Min, lr.ReceiveP99.Max})
	require.Equal(t, lr.ReceiveP99.Median <= lr.TargetP99MS, lr.TargetMet)
	require.Contains(t, stderr.String(), "latency over 3 rounds, median (range)")
}

// A tiny fairness run: two rounds of the three runs, each run's figures
// and the rounds' ratios against references of the same round.
func TestFairnessRunComparesWithinEachRound(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"fairness", "--db", dsn, "--json", "--rounds", "2", "--backlog", "3000",
		"--backlog-keys", "300", "--duration", "500ms", "--trickle-rate", "40", "--batch-size", "100"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	var res struct {
		OK       bool                  `json:"ok"`
		Fairness *bench.FairnessResult `json:"fairness"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	f := res.Fairness
	require.NotNil(t, f)
	require.Equal(t, "header:tenant", f.FairBy)
	require.Len(t, f.Runs, 6)
	modes := map[string]int{}
	for _, r := range f.Runs {
		modes[r.Mode]++
		require.Positive(t, r.TrickleCommitted, r.Mode)
		require.Equal(t, r.TrickleCommitted, r.TrickleCommitToReceive.Count, "%s: every trickle event received", r.Mode)
		if r.Mode == "quiet" {
			require.Zero(t, r.DrainPerSec)
		} else {
			require.Positive(t, r.DrainPerSec, r.Mode)
		}
	}
	require.Equal(t, map[string]int{"quiet": 2, "fair": 2, "unfair": 2}, modes)
	require.Len(t, f.P99Ratio.Values, 2)
	require.Len(t, f.DrainRatio.Values, 2)
	require.Equal(t, f.P99Ratio.Median <= 3, f.P99Met)
	require.Equal(t, f.DrainRatio.Median >= 0.8, f.DrainMet)
	require.Contains(t, stderr.String(), "backlog drain rate, fairness on over off")
}

func TestBadArgumentsExit2WithOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"--producers", "0"},
		{"--nope"},
		{"drain", "--duration", "soon"},
		{"fly"},
		{"latency", "extra"},
		{"--poll-interval", "-1ms"},
		{"drain", "--relays", "0"},
		{"drain", "--relays", "65"},
		{"drain", "--ordering", "all"},
		{"fairness", "--fair-by", "column:tenant"},
		{"fairness", "--backlog", "0"},
		{"drain", "--cpuprofile", filepath.Join(t.TempDir(), "missing")},
	} {
		var stdout, stderr bytes.Buffer
		code := bench.Main(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v", args)
		require.Empty(t, stdout.String(), "%v", args)
		require.Equal(t, 1, strings.Count(stderr.String(), "\n"), "%v: %q", args, stderr.String())
	}
	var stderr bytes.Buffer
	require.Equal(t, 2, bench.Main(context.Background(), []string{"drain", "--ordering", "all"}, io.Discard, &stderr))
	require.Contains(t, stderr.String(), `--ordering: "all" is not ordered, unordered or both`)
}

func TestHelpExits0(t *testing.T) {
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, bench.Main(context.Background(), []string{"-h"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "usage: herald-lab bench")
}

// A connection failure exits 1 and never shows the DSN's password.
func TestNeverPrintsThePassword(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := bench.Main(context.Background(), []string{"producers", "--json",
		"--db", "postgres://bench:hunter2@127.0.0.1:1/nodb?sslmode=disable&connect_timeout=2"}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.NotContains(t, stdout.String()+stderr.String(), "hunter2")
	var res map[string]any
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res))
	require.Equal(t, false, res["ok"])
	require.NotEmpty(t, res["error"])
}
