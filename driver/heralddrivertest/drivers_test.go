package heralddrivertest_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/driver/internal/mysqltest"
	"github.com/herald-outbox/herald/driver/internal/pgtest"
	"github.com/herald-outbox/herald/driver/internal/sqlitetest"
	"github.com/herald-outbox/herald/internal/testenv"
)

// TestMain is goleak.VerifyTestMain plus stopping the throwaway PostgreSQL
// cluster, when one was started, before looking for leaks.
func TestMain(m *testing.M) { testenv.Main(m) }

// Every driver passes the same suite, from this one file. Each PostgreSQL
// harness shares one pool between its cases (a pool per case would hold
// dozens of connections at once on a large machine); each case still gets
// a schema of its own.
func TestDrivers(t *testing.T) {
	t.Parallel()
	t.Run("PostgreSQLOverPgx", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgxHarness(testenv.PostgresPool(t)))
	})
	t.Run("PostgreSQLOverDatabaseSQL", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgSQLHarness(sqlDB(t)))
	})
	// The partitioned outbox keeps every guarantee: the whole suite
	// again, on a table partitioned by day at migrate time.
	t.Run("PostgreSQLPartitioned", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgPartitionedHarness(testenv.PostgresPool(t)))
	})
	// The harnesses above lease the keys of which an ordered claim takes
	// two events or more (the default). Every key leased, and no key
	// leased (Config.ClaimRows), keep every guarantee too: the whole suite
	// again in each mode.
	t.Run("PostgreSQLLeasedKeys", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgLeasedHarness(testenv.PostgresPool(t)))
	})
	t.Run("PostgreSQLRowClaims", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgRowClaimsHarness(testenv.PostgresPool(t)))
	})
	// Fair claims (Config.FairBy) walk the keys of each topic in turns,
	// ordered and unordered claims alike: the whole suite again with them.
	t.Run("PostgreSQLFairByTopic", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, pgFairHarness(testenv.PostgresPool(t)))
	})
	t.Run("SQLite", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, sqliteHarness())
	})
	t.Run("MySQL", func(t *testing.T) {
		t.Parallel()
		heralddrivertest.Exercise(t, mysqlHarness(mysqltest.Pool(t)))
	})
}

// The benchmarks run only with -bench, for instance
// go test -run XXX -bench . ./driver/...
func BenchmarkClaim(b *testing.B)      { benchDrivers(b, heralddrivertest.BenchClaim) }
func BenchmarkComplete(b *testing.B)   { benchDrivers(b, heralddrivertest.BenchComplete) }
func BenchmarkRelayDrain(b *testing.B) { benchDrivers(b, heralddrivertest.BenchRelayDrain) }

func benchDrivers(b *testing.B, bench func(*testing.B, heralddrivertest.Harness)) {
	b.Run("PostgreSQLOverPgx", func(b *testing.B) { bench(b, pgxHarness(testenv.PostgresPool(b))) })
	b.Run("PostgreSQLOverDatabaseSQL", func(b *testing.B) { bench(b, pgSQLHarness(sqlDB(b))) })
	b.Run("SQLite", func(b *testing.B) { bench(b, sqliteHarness()) })
	b.Run("MySQL", func(b *testing.B) { bench(b, mysqlHarness(mysqltest.Pool(b))) })
}

// Payload caps above the default, a different one per harness: proves each
// writer honours its Config.
const (
	pgxMaxPayload    = 5 << 18
	pgSQLMaxPayload  = 3 << 19
	sqliteMaxPayload = 3 << 19
	mysqlMaxPayload  = 5 << 19
)

func pgxHarness(pool *pgxpool.Pool) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx", New: func(t testing.TB) *heralddrivertest.Driver {
		return pgtest.New(t, pool, heraldpg.Config{MaxPayloadBytes: pgxMaxPayload}).Driver
	}}
}

func pgLeasedHarness(pool *pgxpool.Pool) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx-leased", KeyEveryMessage: true, New: func(t testing.TB) *heralddrivertest.Driver {
		// Every key leased: each key of the suite's has one event here.
		return pgtest.New(t, pool, heraldpg.Config{LeaseMinEvents: 1}).Driver
	}, Skip: map[string]string{
		"ListPublishedSelectsPublishedRowsInPublicationOrder": "it selects the events written without a key, which this harness keys",
		"UnorderedEventsAreNotHeldBack": "it claims events written without a key, which this harness keys, " +
			"then claims by age behind them while they are leased",
	}}
}

func pgRowClaimsHarness(pool *pgxpool.Pool) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx-rows", New: func(t testing.TB) *heralddrivertest.Driver {
		return pgtest.New(t, pool, heraldpg.Config{ClaimRows: true}).Driver
	}}
}

func pgFairHarness(pool *pgxpool.Pool) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx-fair", New: func(t testing.TB) *heralddrivertest.Driver {
		return pgtest.New(t, pool, heraldpg.Config{FairBy: "topic"}).Driver
	}, Skip: map[string]string{
		"UnorderedClaimTakesTheLongestWaitingFirst": "a fair unordered claim takes each key's events in commit order, " +
			"topic by topic, not the oldest available of the table first (docs/how-the-relay-works.md, Fair claims)",
		"ClaimTakesRowsWhileUnderItsByteBound": "its unordered half expects the oldest available rows first; " +
			"the ordered half is the same claim as in the other harnesses",
	}}
}

func pgPartitionedHarness(pool *pgxpool.Pool) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx-partitioned", New: func(t testing.TB) *heralddrivertest.Driver {
		return pgtest.New(t, pool, heraldpg.Config{Partition: &heraldpg.Partitioning{}}).Driver
	}}
}

func pgSQLHarness(db *sql.DB) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "pgx-stdlib", New: func(t testing.TB) *heralddrivertest.Driver {
		return pgtest.NewSQL(t, db, heraldpg.Config{MaxPayloadBytes: pgSQLMaxPayload})
	}}
}

func sqliteHarness() heralddrivertest.Harness {
	return heralddrivertest.Harness{
		Name: "sqlite",
		New: func(t testing.TB) *heralddrivertest.Driver {
			return sqlitetest.New(t, heraldsqlite.Config{MaxPayloadBytes: sqliteMaxPayload}).Driver
		},
		Skip: map[string]string{
			"LateCommitIsDeliveredAfterWhatItsKeyPublished": "SQLite has one writer at a time: a transaction " +
				"left open holds the write lock, so no later transaction commits before it and seq order is commit order",
		},
	}
}

// mysqlHarness shares one pool between its cases, as the PostgreSQL
// harnesses do; each case gets a database of its own.
func mysqlHarness(db *sql.DB) heralddrivertest.Harness {
	return heralddrivertest.Harness{Name: "mysql", New: func(t testing.TB) *heralddrivertest.Driver {
		return mysqltest.New(t, db, heraldmysql.Config{MaxPayloadBytes: mysqlMaxPayload}).Driver
	}}
}

// sqlDB is a database/sql pool over PostgreSQL, closed when tb ends.
func sqlDB(tb testing.TB) *sql.DB {
	db := stdlib.OpenDBFromPool(testenv.PostgresPool(tb))
	tb.Cleanup(func() { require.NoError(tb, db.Close()) })
	return db
}
