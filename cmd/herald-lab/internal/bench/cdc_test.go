package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"runtime"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/bench"
	"github.com/herald-outbox/herald/internal/testenv"
)

// --cdc on a cluster with wal_level=logical: the drain runs the
// change-data-capture relay as a third system, verified as the others, and
// the latency runs with it; neither leaves a slot or a publication behind.
func TestCDC(t *testing.T) {
	testenv.Long(t)
	cluster := testenv.PrivateCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("DrainRunsTheCDCRelayBesideThePollingRelayAndTheCeiling", func(t *testing.T) {
		rec, remove := bench.AddRecordingSink()
		defer remove()
		const events, keys = 2000, 50
		var stdout, stderr bytes.Buffer
		code := bench.Main(ctx, []string{"drain", "--db", cluster.DSN, "--json", "--cdc", "--to", "jetstream,discard,record",
			"--events", "2000", "--keys", "50", "--rounds", "2"}, &stdout, &stderr)
		require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

		var res struct {
			OK    bool `json:"ok"`
			Drain struct {
				Targets []bench.DrainTarget   `json:"targets"`
				CDC     []bench.CDCComparison `json:"cdc"`
			} `json:"drain"`
		}
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
		require.True(t, res.OK)

		// Three destinations, two rounds, four systems, each round
		// starting with another.
		require.Len(t, res.Drain.Targets, 24)
		var order []string
		for _, tg := range res.Drain.Targets[:8] {
			order = append(order, tg.System)
		}
		require.Equal(t, []string{"herald", "ceiling", "minimal", "cdc", "ceiling", "minimal", "cdc", "herald"}, order)
		for _, tg := range res.Drain.Targets {
			require.True(t, tg.Verified, "%s %s round %d", tg.Name, tg.System, tg.Round)
			require.EqualValues(t, events, tg.Published, "%s %s", tg.Name, tg.System)
			require.Zero(t, tg.Dead, "%s %s", tg.Name, tg.System)
			if tg.Name == "jetstream" {
				require.NotNil(t, tg.StreamMessages)
				require.EqualValues(t, events, *tg.StreamMessages, "%s round %d", tg.System, tg.Round)
				if tg.System != "ceiling" && tg.System != "minimal" {
					require.Equal(t, &bench.KeyOrder{Messages: events, Keys: keys}, tg.KeyOrder,
						"%s: the stream read back: every event once, each key in commit order", tg.System)
				}
			}
			if tg.System == "cdc" && runtime.GOOS == "linux" {
				require.NotNil(t, tg.DatabaseCPUPerEventUS, "the database's CPU is measured for cdc too")
			}
		}

		// What each drain handed the record destination: every event of
		// the backlog, once.
		drains := rec.Drains()
		require.Len(t, drains, 8)
		for i, counts := range drains {
			require.Len(t, counts, events, "record drain %d", i)
			for id, n := range counts {
				require.Equal(t, 1, n, "record drain %d: event %s arrived %d times", i, id, n)
			}
		}

		require.Len(t, res.Drain.CDC, 3)
		for _, c := range res.Drain.CDC {
			require.NotNil(t, c.VsCeiling, c.Name)
			require.Len(t, c.VsCeiling.Ratios, 2, c.Name)
			require.Positive(t, c.VsCeiling.Median, c.Name)
			require.Len(t, c.VsHerald.Ratios, 2, c.Name)
			require.Positive(t, c.VsHerald.Median, c.Name)
			require.LessOrEqual(t, c.VsHerald.Min, c.VsHerald.Median, c.Name)
			require.LessOrEqual(t, c.VsHerald.Median, c.VsHerald.Max, c.Name)
			if runtime.GOOS == "linux" {
				require.NotNil(t, c.DatabaseCPUVsCeiling, c.Name)
				require.NotNil(t, c.DatabaseCPUVsHerald, c.Name)
			}
		}
		human := stderr.String()
		require.Contains(t, human, "(--cdc)")
		for _, name := range []string{"jetstream", "discard", "record"} {
			require.Regexp(t, `(?m)^  `+name+`: CDC relay at \d+\.\d\d of the ceiling \(median of 2 rounds; range \d+\.\d\d-\d+\.\d\d\)$`, human)
			require.Regexp(t, `(?m)^  `+name+`: CDC relay at \d+\.\d\d of Herald's polling relay \(median of 2 rounds; range `, human)
		}
		require.Regexp(t, `(?m)^  to jetstream cdc .*\n     stream read \d+ x `, human)
		requireNoSlotLeft(ctx, t, cluster.DSN)
	})

	t.Run("LatencyRunsWithTheCDCRelayInsteadOfPolling", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := bench.Main(ctx, []string{"latency", "--db", cluster.DSN, "--json", "--cdc",
			"--duration", "1s", "--rate", "200"}, &stdout, &stderr)
		require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
		var res struct {
			OK      bool                `json:"ok"`
			Latency bench.LatencyResult `json:"latency"`
		}
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
		require.True(t, res.OK)
		l := res.Latency
		require.Equal(t, "cdc", l.Source)
		require.Positive(t, l.Committed)
		require.Equal(t, l.Committed, l.Received)
		require.Equal(t, l.Committed, l.CommitToAck.Count, "every event acknowledged")
		require.Equal(t, l.Committed, l.CommitToClaim.Count, "every event read from the stream")
		require.Positive(t, l.CommitToAck.P50)
		require.GreaterOrEqual(t, l.CommitToAck.P99, l.CommitToAck.P50)
		human := stderr.String()
		require.Contains(t, human, "not the table (--cdc)")
		require.Regexp(t, `(?m)^  commit-to-read +p50 `, human)
		require.Regexp(t, `(?m)^  commit-to-PubAck +p50 +\d+\.\d\dms .* p99 +\d+\.\d\dms`, human)
		requireNoSlotLeft(ctx, t, cluster.DSN)
	})
}

// The producers benchmark with --cdc adds the two write modes of a table
// relayed by change-data-capture: WriteTx on the streamed table, and with
// EmitMessages (no row), with the second's rate against the first's.
func TestCDCProducersCompareTheWriteModes(t *testing.T) {
	testenv.Long(t)
	cluster := testenv.PrivateCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"producers", "--db", cluster.DSN, "--json", "--cdc",
		"--duration", "1s", "--producers", "2"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())
	var res struct {
		OK        bool                  `json:"ok"`
		Producers bench.ProducersResult `json:"producers"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	var names []string
	for _, s := range res.Producers.Shapes {
		names = append(names, s.Name)
		require.Positive(t, s.TxPerSec, s.Name)
	}
	require.Equal(t, []string{"business_only", "hand_insert", "writetx", "hand_insert_notify", "writetx_streamed", "writetx_emit"}, names)
	require.Positive(t, res.Producers.EmitRatio)
	require.Regexp(t, `(?m)^  \+ WriteTx EmitMessages, no row \(cdc\) +[\d,]+ tx/s +\d\.\d{3} of WriteTx on the streamed table`, stderr.String())
	requireNoSlotLeft(ctx, t, cluster.DSN)
}

// requireNoSlotLeft checks that the runs dropped their slots, publications
// and schemas.
func requireNoSlotLeft(ctx context.Context, t *testing.T, dsn string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var slots, pubs, schemas int
	require.NoError(t, conn.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_replication_slots),
		(SELECT count(*) FROM pg_publication),
		(SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'herald_bench_%')`).Scan(&slots, &pubs, &schemas))
	require.Zero(t, slots, "replication slots left")
	require.Zero(t, pubs, "publications left")
	require.Zero(t, schemas, "schemas left")
}

// --cdc on a server whose wal_level is not logical is refused before
// anything is measured, with how to enable it.
func TestCDCRefusedWithoutLogicalWAL(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	var level string
	require.NoError(t, conn.QueryRow(ctx, `SHOW wal_level`).Scan(&level))
	require.NoError(t, conn.Close(ctx))
	if level == "logical" {
		t.Skipf("the test database has wal_level = logical: run with %s naming a server with wal_level = replica "+
			"(such as postgres://postgres@127.0.0.1:5432/test?sslmode=disable) to check the refusal", testenv.EnvPostgres)
	}
	for _, sub := range []string{"drain", "latency"} {
		var stdout, stderr bytes.Buffer
		code := bench.Main(ctx, []string{sub, "--db", dsn, "--json", "--cdc", "--events", "100", "--duration", "1s"}, &stdout, &stderr)
		require.Equal(t, 1, code, "%s: stderr:\n%s", sub, stderr.String())
		var res struct {
			OK    bool           `json:"ok"`
			Error string         `json:"error"`
			Drain map[string]any `json:"drain"`
		}
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
		require.False(t, res.OK)
		require.Nil(t, res.Drain, "nothing was measured")
		require.Contains(t, res.Error, "wal_level = "+level, sub)
		require.Contains(t, res.Error, "ALTER SYSTEM SET wal_level = logical", sub)
		require.Contains(t, res.Error, "restart PostgreSQL", sub)
		require.Contains(t, stderr.String(), "ALTER SYSTEM SET wal_level = logical", sub)
	}
}

// --cdc where it cannot run is a usage error.
func TestCDCFlagIsRefusedWhereItCannotRun(t *testing.T) {
	for _, args := range [][]string{
		{"drain", "--cdc", "--db", "mysql://root@127.0.0.1:3306/test"},
	} {
		var stdout, stderr bytes.Buffer
		code := bench.Main(context.Background(), args, &stdout, &stderr)
		require.Equal(t, 2, code, "%v", args)
		require.Contains(t, stderr.String(), "--cdc", "%v", args)
	}
}
