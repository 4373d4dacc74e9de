package heraldpg_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// diagnose runs Diagnose and returns the findings of one check.
func diagnose(t *testing.T, d *heraldpg.Driver, p heraldpg.DiagnoseParams, check string) []heraldpg.Finding {
	t.Helper()
	all, err := d.Diagnose(context.Background(), p)
	require.NoError(t, err)
	var out []heraldpg.Finding
	for _, f := range all {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

func TestDiagnoseReadsTheMigrationVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	d, err := heraldpg.New(pool, &heraldpg.Config{Schema: schema})
	require.NoError(t, err)

	t.Run("MissingTableIsAnErrorThatSaysToMigrate", func(t *testing.T) {
		got := diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckSchema)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Contains(t, got[0].Message, "does not exist")
		require.Equal(t, "herald migrate --schema "+schema+" --table herald_outbox", got[0].Fix)
	})
	_, latest, err := d.SchemaVersion(ctx)
	require.NoError(t, err)
	require.NoError(t, d.MigrateTo(ctx, latest-1))
	t.Run("AVersionBehindIsAnError", func(t *testing.T) {
		got := diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckSchema)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Contains(t, got[0].Message, fmt.Sprintf("schema version %d; this herald needs %d", latest-1, latest))
		require.Contains(t, got[0].Fix, "herald migrate")
	})
	require.NoError(t, d.Migrate(ctx))
	t.Run("TheCurrentVersionIsOK", func(t *testing.T) {
		got := diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckSchema)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
	})
}

// holdHorizon opens a REPEATABLE READ transaction that has taken its
// snapshot (and an xid) with a query that quotes a secret, and returns its
// backend's pid; the transaction ends with the test.
func holdHorizon(t *testing.T, query string) int32 {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresDSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var pid int32
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = tx.Exec(ctx, "SELECT txid_current()")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, query)
	require.NoError(t, err)
	return pid
}

func TestDiagnoseNamesATransactionHoldingTheXminHorizon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const secret = "hunter2-Secret"
	pid := holdHorizon(t, "SELECT 'password="+secret+"' AS login_check, 1 AS a_column_that_takes_the_query_past_sixty")
	find := func(lease time.Duration) *heraldpg.Finding {
		for _, f := range diagnose(t, b.Store, heraldpg.DiagnoseParams{Lease: lease}, heraldpg.CheckXmin) {
			if strings.Contains(f.Message, fmt.Sprintf("pid %d ", pid)) {
				return &f
			}
		}
		return nil
	}
	// Under the default lease, a transaction a moment old is no finding.
	require.Nil(t, find(0))
	var f *heraldpg.Finding
	require.Eventually(t, func() bool { f = find(time.Second); return f != nil }, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, heraldpg.SeverityWarning, f.Severity)
	require.Contains(t, f.Message, "idle in transaction")
	require.Contains(t, f.Message, "longer than the lease (1s)")
	require.Contains(t, f.Message, "query: SELECT 'password=")
	require.NotContains(t, f.Message, secret)
	require.NotContains(t, f.Message, "sixty", "the query is cut to its first 60 characters")
	require.Equal(t, fmt.Sprintf("SELECT pg_terminate_backend(%d); or make the application end its transactions", pid), f.Fix)

	// Ten leases old, it is an error.
	require.Eventually(t, func() bool {
		f = find(100 * time.Millisecond)
		return f != nil && f.Severity == heraldpg.SeverityError
	}, 10*time.Second, 50*time.Millisecond)
}

// aboutTable keeps the autovacuum findings that name the outbox table: a
// shared test server may run with autovacuum off altogether, which is a
// finding of its own.
func aboutTable(t *testing.T, b *bundle) []heraldpg.Finding {
	t.Helper()
	var out []heraldpg.Finding
	for _, f := range diagnose(t, b.Store, heraldpg.DiagnoseParams{}, heraldpg.CheckAutovacuum) {
		if strings.Contains(f.Message, b.Config.Schema+".herald_outbox") {
			out = append(out, f)
		}
	}
	return out
}

func TestDiagnoseFindsAutovacuumOffOrBehind(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("DisabledOnTheTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, f := range aboutTable(t, b) {
			require.Equal(t, heraldpg.SeverityOK, f.Severity, f)
		}
		_, err := b.Pool.Exec(ctx, "ALTER TABLE "+b.Store.Table()+" SET (autovacuum_enabled = false)")
		require.NoError(t, err)
		got := aboutTable(t, b)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Contains(t, got[0].Message, "autovacuum is disabled on "+b.Config.Schema+".herald_outbox (autovacuum_enabled = false)")
		require.Equal(t, "ALTER TABLE "+b.Config.Schema+".herald_outbox RESET (autovacuum_enabled);", got[0].Fix)

		// The fix the finding gives clears it.
		_, err = b.Pool.Exec(ctx, got[0].Fix)
		require.NoError(t, err)
		for _, f := range aboutTable(t, b) {
			require.Equal(t, heraldpg.SeverityOK, f.Severity, f)
		}
	})

	t.Run("BehindWhileATransactionHoldsTheHorizon", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The transaction's snapshot keeps every row deleted after it: no
		// vacuum, auto or not, can clear them.
		holdHorizon(t, "SELECT 1")
		_, err := b.Pool.Exec(ctx, "INSERT INTO "+b.Store.Table()+" (topic, payload) SELECT 'doctor', '\\x00' FROM generate_series(1, 12000)")
		require.NoError(t, err)
		_, err = b.Pool.Exec(ctx, "DELETE FROM "+b.Store.Table())
		require.NoError(t, err)
		// The statistics reach pg_stat_user_tables within a second or so.
		var got []heraldpg.Finding
		require.Eventually(t, func() bool {
			got = aboutTable(t, b)
			return len(got) == 1 && got[0].Severity == heraldpg.SeverityWarning
		}, 20*time.Second, 100*time.Millisecond)
		require.Contains(t, got[0].Message, "autovacuum is behind on "+b.Config.Schema+".herald_outbox: 12000 dead row versions beside 0 live")
		require.Contains(t, got[0].Fix, "VACUUM (VERBOSE) "+b.Config.Schema+".herald_outbox;")
	})
}

func TestDiagnoseChecksTheClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := diagnose(t, b.Store, heraldpg.DiagnoseParams{}, heraldpg.CheckClock)
	require.Len(t, got, 1)
	require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])

	// A relay whose clock runs five seconds ahead of the database's.
	ahead := func() time.Time { return time.Now().Add(5 * time.Second) }
	got = diagnose(t, b.Store, heraldpg.DiagnoseParams{Now: ahead}, heraldpg.CheckClock)
	require.Len(t, got, 1)
	require.Equal(t, heraldpg.SeverityWarning, got[0].Severity)
	require.Regexp(t, `^the database's clock is 5(\.\d)?s behind this host's`, got[0].Message)
	require.Contains(t, got[0].Fix, "NTP")
}

func TestDiagnoseChecksWALLevelForChangeDataCapture(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Empty(t, diagnose(t, b.Store, heraldpg.DiagnoseParams{}, heraldpg.CheckWALLevel), "polling needs no logical wal_level")

	var level string
	require.NoError(t, b.Pool.QueryRow(context.Background(), "SHOW wal_level").Scan(&level))
	got := diagnose(t, b.Store, heraldpg.DiagnoseParams{CDC: true}, heraldpg.CheckWALLevel)
	require.Len(t, got, 1)
	// The server's wal_level is a setting of the whole server, which a
	// shared test server's is not changed for: the finding must match it.
	if level == "logical" {
		require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
	} else {
		require.Equal(t, heraldpg.SeverityError, got[0].Severity, got[0])
		require.Contains(t, got[0].Message, "wal_level is "+level)
		require.Equal(t, "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL", got[0].Fix)
	}
}

// TestDiagnoseFindsSlotsAndReplicationRights runs on a cluster of its own:
// slots keep write-ahead log, and roles belong to the whole server.
func TestDiagnoseFindsSlotsAndReplicationRights(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.PrivateCluster(t)
	admin, err := pgxpool.New(ctx, c.DSN)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	d, err := heraldpg.New(admin, nil)
	require.NoError(t, err)

	got := diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckSlots)
	require.Len(t, got, 1)
	require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])

	_, err = admin.Exec(ctx, "SELECT pg_create_physical_replication_slot('doctor_standby', true)")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_create_logical_replication_slot('doctor_cdc', 'pgoutput')")
	require.NoError(t, err)
	got = diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckSlots)
	require.Len(t, got, 3, "%v", got)
	require.Equal(t, heraldpg.SeverityWarning, got[0].Severity)
	require.Contains(t, got[0].Message, "logical slot doctor_cdc is inactive: no reader, holds the catalog_xmin horizon")
	require.Equal(t, "SELECT pg_drop_replication_slot('doctor_cdc'); if nothing reads it any more, else start its reader", got[0].Fix)
	require.Contains(t, got[1].Message, "physical slot doctor_standby is inactive: no reader; it keeps")
	require.Equal(t, heraldpg.SeverityWarning, got[2].Severity)
	require.Contains(t, got[2].Message, "max_slot_wal_keep_size is -1 with 2 replication slot(s)")

	// The fix for the unbounded log clears that finding.
	_, err = admin.Exec(ctx, "ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return len(diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckSlots)) == 2
	}, 10*time.Second, 50*time.Millisecond)

	// A role without REPLICATION, with --source cdc.
	_, err = admin.Exec(ctx, "CREATE ROLE doctor_app LOGIN")
	require.NoError(t, err)
	app, err := pgxpool.New(ctx, strings.Replace(c.DSN, "postgres@", "doctor_app@", 1))
	require.NoError(t, err)
	t.Cleanup(app.Close)
	ad, err := heraldpg.New(app, nil)
	require.NoError(t, err)
	got = diagnose(t, ad, heraldpg.DiagnoseParams{CDC: true}, heraldpg.CheckReplication)
	require.Len(t, got, 1)
	require.Equal(t, heraldpg.SeverityError, got[0].Severity)
	require.Equal(t, "role doctor_app has no REPLICATION; change-data-capture (--source cdc) needs it", got[0].Message)
	require.Equal(t, `ALTER ROLE "doctor_app" REPLICATION;`, got[0].Fix)
	fix := got[0].Fix
	got = diagnose(t, d, heraldpg.DiagnoseParams{CDC: true}, heraldpg.CheckWALLevel)
	require.Equal(t, heraldpg.SeverityOK, got[0].Severity, "the private cluster runs with wal_level=logical")

	_, err = admin.Exec(ctx, fix)
	require.NoError(t, err)
	got = diagnose(t, ad, heraldpg.DiagnoseParams{CDC: true}, heraldpg.CheckReplication)
	require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
}

// TestDiagnoseChecksTheCDCSlotAndPublication puts change-data-capture's
// slot and publication into each bad state on a cluster of its own (with
// wal_level=logical), and applies the fixes the findings name.
func TestDiagnoseChecksTheCDCSlotAndPublication(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.PrivateCluster(t)
	admin, err := pgxpool.New(ctx, c.DSN)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	d, err := heraldpg.New(admin, nil)
	require.NoError(t, err)
	exec := func(sql string) {
		t.Helper()
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	cdc := heraldpg.DiagnoseParams{CDC: true}

	require.Empty(t, diagnose(t, d, heraldpg.DiagnoseParams{}, heraldpg.CheckCDCSlot), "polling needs no slot")
	// No table: the slot is checked, the publication (of a table that does
	// not exist) is not.
	got := diagnose(t, d, cdc, heraldpg.CheckCDCSlot)
	require.Len(t, got, 1)
	require.Equal(t, heraldpg.SeverityError, got[0].Severity)
	require.Equal(t, "replication slot herald_outbox does not exist: herald relay --source cdc cannot start", got[0].Message)
	require.Contains(t, got[0].Fix, "herald relay --source cdc --cdc-slot herald_outbox --cdc-create-slot")
	require.Empty(t, diagnose(t, d, cdc, heraldpg.CheckCDCPub))

	require.NoError(t, d.Migrate(ctx))
	t.Run("MissingPublication", func(t *testing.T) {
		got := diagnose(t, d, cdc, heraldpg.CheckCDCPub)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Equal(t, "publication herald_outbox does not exist: herald relay --source cdc cannot start", got[0].Message)
		require.Equal(t, `CREATE PUBLICATION "herald_outbox" FOR TABLE public.herald_outbox WITH (publish = 'insert'); or start the relay once with --cdc-create-slot`, got[0].Fix)
	})
	t.Run("APublicationOfAnotherTable", func(t *testing.T) {
		exec("CREATE TABLE other (id int)")
		exec("CREATE PUBLICATION elsewhere FOR TABLE other")
		got := diagnose(t, d, heraldpg.DiagnoseParams{CDC: true, Publication: "elsewhere"}, heraldpg.CheckCDCPub)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Equal(t, "publication elsewhere does not publish public.herald_outbox: the slot reads none of its events", got[0].Message)
		exec(got[0].Fix)
		got = diagnose(t, d, heraldpg.DiagnoseParams{CDC: true, Publication: "elsewhere"}, heraldpg.CheckCDCPub)
		require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
	})
	t.Run("APublicationWithoutInserts", func(t *testing.T) {
		exec("CREATE PUBLICATION herald_outbox FOR TABLE public.herald_outbox WITH (publish = 'update, delete')")
		got := diagnose(t, d, cdc, heraldpg.CheckCDCPub)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Contains(t, got[0].Message, "publication herald_outbox does not publish inserts")
		exec(got[0].Fix)
		got = diagnose(t, d, cdc, heraldpg.CheckCDCPub)
		require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
		require.Equal(t, "publication herald_outbox publishes the inserts of public.herald_outbox", got[0].Message)
	})
	t.Run("APhysicalSlotOfTheName", func(t *testing.T) {
		exec("SELECT pg_create_physical_replication_slot('herald_outbox')")
		got := diagnose(t, d, cdc, heraldpg.CheckCDCSlot)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Contains(t, got[0].Message, "replication slot herald_outbox is a physical slot; change-data-capture needs a logical slot of plugin pgoutput on database")
		exec("SELECT pg_drop_replication_slot('herald_outbox')")
	})
	t.Run("TheSlotOfAnotherPlugin", func(t *testing.T) {
		exec("SELECT pg_create_logical_replication_slot('herald_outbox', 'test_decoding')")
		got := diagnose(t, d, cdc, heraldpg.CheckCDCSlot)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityError, got[0].Severity)
		require.Contains(t, got[0].Message, "is a logical slot of plugin test_decoding on database")
		exec("SELECT pg_drop_replication_slot('herald_outbox')")
	})
	t.Run("AnInactiveSlotIsAWarningOfTheSlotsCheck", func(t *testing.T) {
		exec("SELECT pg_create_logical_replication_slot('herald_outbox', 'pgoutput')")
		got := diagnose(t, d, cdc, heraldpg.CheckCDCSlot)
		require.Len(t, got, 1)
		require.Equal(t, heraldpg.SeverityOK, got[0].Severity, got[0])
		slots := diagnose(t, d, cdc, heraldpg.CheckSlots)
		require.Contains(t, slots[0].Message, "logical slot herald_outbox is inactive")
		require.Equal(t, heraldpg.SeverityWarning, slots[0].Severity)
		require.Contains(t, slots[len(slots)-1].Message, "max_slot_wal_keep_size is -1")
	})
}
