package heraldpg

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// healthy is a diagnosis with nothing to report.
func healthy() diagnosis {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	return diagnosis{table: "public.herald_outbox", schema: "public", name: "herald_outbox", version: 3, latest: 3,
		walLevel: "replica", maxSlotWALKeep: "-1", autovacuum: true, trackCounts: true, avThreshold: 50, avScale: 0.2,
		role: "app", dbNow: now, before: now.Add(-time.Millisecond), after: now.Add(time.Millisecond),
		tables: []vacuumFacts{{name: "public.herald_outbox", options: []string{""}, live: 100, dead: 10, sinceVacuum: time.Hour}}}
}

func TestFindingsJudgeEachFact(t *testing.T) {
	t.Parallel()
	p := DiagnoseParams{Lease: time.Minute}
	for _, tc := range []struct {
		name     string
		change   func(g *diagnosis)
		check    string
		severity Severity
		message  string
	}{
		{"NothingWrongIsOKForEveryCheck", func(*diagnosis) {}, CheckXmin, SeverityOK, "no transaction has held"},
		{"ANewerTableThanTheBinary", func(g *diagnosis) { g.version = 4 }, CheckSchema, SeverityError, "newer than this herald knows (3)"},
		{"AnOldPreparedTransaction", func(g *diagnosis) {
			g.prepared = []preparedXact{{gid: "it's", owner: "app", age: 2 * time.Minute}}
		}, CheckXmin, SeverityWarning, `prepared transaction "it's" (owner app) has held the xmin horizon for 2m0s`},
		{"AStaleVacuumWithDeadRowsPastTheThreshold", func(g *diagnosis) {
			g.tables[0].dead, g.tables[0].sinceVacuum = 500, 25*time.Hour
		}, CheckAutovacuum, SeverityWarning, "500 dead row versions beside 100 live, last vacuumed 25h0m0s ago"},
		{"DeadRowsBelowTheThresholdAreNotBehind", func(g *diagnosis) {
			g.tables[0].dead, g.tables[0].sinceVacuum = 60, 25*time.Hour
		}, CheckAutovacuum, SeverityOK, "keeping up"},
		{"AutovacuumDisabledAsOff", func(g *diagnosis) {
			g.tables[0].options = []string{"fillfactor=70", "autovacuum_enabled=off"}
		}, CheckAutovacuum, SeverityError, "autovacuum is disabled on public.herald_outbox"},
		{"AutovacuumEnabledExplicitly", func(g *diagnosis) {
			g.tables[0].options = []string{"autovacuum_enabled=true"}
		}, CheckAutovacuum, SeverityOK, "keeping up"},
		{"AnActiveSlotKeepingTooMuch", func(g *diagnosis) {
			g.maxSlotWALKeep = "10GB"
			g.slots = []slotFacts{{name: "s", kind: "logical", active: true, hasCatalog: true, retained: 3 << 30}}
		}, CheckSlots, SeverityWarning, "logical slot s keeps 3.0 GiB of write-ahead log (more than 1.0 GiB)"},
		{"AnInactiveSlotKeepingTooMuch", func(g *diagnosis) {
			g.maxSlotWALKeep = "10GB"
			g.slots = []slotFacts{{name: "s", kind: "logical", hasCatalog: true, catalogAge: 7, retained: 2 << 30}}
		}, CheckSlots, SeverityError, "logical slot s is inactive: no reader, holds the catalog_xmin horizon (7 transactions old); it keeps 2.0 GiB"},
		{"AnInactiveSlotHoldingXmin", func(g *diagnosis) {
			g.maxSlotWALKeep = "10GB"
			g.slots = []slotFacts{{name: "standby", kind: "physical", hasXmin: true, xminAge: 9, retained: 5}}
		}, CheckSlots, SeverityError, "physical slot standby is inactive and holds the xmin horizon (9 transactions old)"},
		{"StreamedInsertsNeedLogical", func(g *diagnosis) { g.streamed = true }, CheckWALLevel, SeverityError,
			"wal_level is replica; change-data-capture (the table's inserts are streamed) needs logical"},
		{"ADatabaseClockBehind", func(g *diagnosis) { g.dbNow = g.dbNow.Add(-3 * time.Second) }, CheckClock, SeverityWarning,
			"the database's clock is 3s behind this host's"},
		{"PartitionsAheadAllThere", func(g *diagnosis) {
			cur := binStart(g.dbNow, time.Hour)
			g.parts = &partitionFacts{interval: time.Hour, ahead: 3, current: cur, covered: cur.Add(4 * time.Hour)}
		}, CheckPartitions, SeverityOK, "has its partition for now and 3 ahead"},
		{"PartitionsAheadMissing", func(g *diagnosis) {
			cur := binStart(g.dbNow, time.Hour)
			g.parts = &partitionFacts{interval: time.Hour, ahead: 3, current: cur, covered: cur.Add(2 * time.Hour)}
		}, CheckPartitions, SeverityWarning, "1 of the 3 partitions public.herald_outbox keeps ahead exist (its partitions end at 2026-11-01T14:00:00Z)"},
		{"NoPartitionForNow", func(g *diagnosis) {
			cur := binStart(g.dbNow, time.Hour)
			g.parts = &partitionFacts{interval: time.Hour, ahead: 3, current: cur, covered: cur}
		}, CheckPartitions, SeverityError, "no partition of public.herald_outbox holds the rows written now (from 2026-11-01T12:00:00Z)"},
		{"ASkewWithinTheRoundTrip", func(g *diagnosis) {
			g.before, g.after = g.dbNow.Add(-2*time.Second), g.dbNow.Add(2*time.Second+500*time.Millisecond)
		}, CheckClock, SeverityOK, "within 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := healthy()
			tc.change(&g)
			var got []Finding
			for _, f := range g.findings(p) {
				if f.Check == tc.check {
					got = append(got, f)
				}
			}
			require.NotEmpty(t, got)
			require.Equal(t, tc.severity, got[0].Severity, got[0])
			require.Contains(t, got[0].Message, tc.message)
			if tc.severity != SeverityOK {
				require.NotEmpty(t, got[0].Fix)
			}
		})
	}
}

func TestFindingsOfAHealthyDatabaseAreAllOK(t *testing.T) {
	t.Parallel()
	for _, f := range healthy().findings(DiagnoseParams{Lease: time.Minute}) {
		require.Equal(t, SeverityOK, f.Severity, f)
		require.Empty(t, f.Fix)
	}
}

func TestQuoteQueryScrubsBeforeCutting(t *testing.T) {
	t.Parallel()
	secret := "s3cr3t-" + strings.Repeat("x", 60)
	q := quoteQuery("SELECT *\n  FROM users WHERE password = '" + secret + "'")
	require.NotContains(t, q, "s3cr3t")
	require.True(t, strings.HasPrefix(q, "SELECT * FROM users WHERE password ="), q)
	require.Equal(t, "(none)", quoteQuery(""))
	require.Equal(t, 60+len("..."), len([]rune(quoteQuery(strings.Repeat("é", 100)))))
}

// A partitioned outbox's partitions are read from the catalog: all there
// after Migrate, a warning once the last one ahead is gone, an error once
// none holds now (as when no maintenance ran for a while), and the fix
// the finding names brings them back.
func TestDiagnoseFindsMissingPartitions(t *testing.T) {
	t.Parallel()
	// The partition "for now" is the day's: a run that spans midnight
	// (UTC, by the database's clock) starts again on a fresh table.
	for try := 0; try < 2; try++ {
		if missingPartitionsFound(t) {
			return
		}
	}
	t.Fatal("the day changed during both runs")
}

// missingPartitionsFound runs the scenario on a table of its own and
// reports false when the day changed meanwhile, so that what it saw may
// be of two days.
func missingPartitionsFound(t *testing.T) bool {
	pool := testenv.PostgresPool(t)
	d, cur := newPartitioned(t, pool, &Partitioning{Interval: 24 * time.Hour, Ahead: 2})
	partitions := func() []Finding {
		all, err := d.Diagnose(t.Context(), DiagnoseParams{})
		require.NoError(t, err)
		var out []Finding
		for _, f := range all {
			if f.Check == CheckPartitions {
				out = append(out, f)
			}
		}
		require.Len(t, out, 1)
		return out
	}
	sameDay := func() bool {
		var now time.Time
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT now()`).Scan(&now))
		return binStart(now, 24*time.Hour).Equal(cur)
	}
	drop := func(from time.Time) {
		_, err := pool.Exec(t.Context(), `DROP TABLE `+d.names.qualify(d.names.partitionName(from)))
		require.NoError(t, err)
	}
	f := partitions()
	if !sameDay() {
		return false
	}
	require.Equal(t, SeverityOK, f[0].Severity, f[0])
	require.Contains(t, f[0].Message, "has its partition for now and 2 ahead")

	drop(cur.Add(2 * day))
	f = partitions()
	if !sameDay() {
		return false
	}
	require.Equal(t, SeverityWarning, f[0].Severity, f[0])
	require.Contains(t, f[0].Message, "1 of the 2 partitions")
	require.Contains(t, f[0].Fix, "MaintainPartitions")

	// As when no maintenance ran for a while: no partition from now on.
	drop(cur.Add(day))
	drop(cur)
	f = partitions()
	if !sameDay() {
		return false
	}
	require.Equal(t, SeverityError, f[0].Severity, f[0])
	require.Contains(t, f[0].Message, "holds the rows written now")

	// The fix the finding names brings them back.
	_, err := d.MaintainPartitions(t.Context(), 0, 0)
	require.NoError(t, err)
	f = partitions()
	if !sameDay() {
		return false
	}
	require.Equal(t, SeverityOK, f[0].Severity, f[0])
	return true
}
