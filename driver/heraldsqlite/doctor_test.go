package heraldsqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldspec"
)

// diagnose runs Diagnose and returns its findings by check.
func diagnose(t *testing.T, d *heraldsqlite.Driver) map[string]heraldspec.Finding {
	t.Helper()
	all, err := d.Diagnose(context.Background(), heraldspec.DiagnoseParams{})
	require.NoError(t, err)
	out := map[string]heraldspec.Finding{}
	for _, f := range all {
		_, twice := out[f.Check]
		require.False(t, twice, "one finding per check: %v", all)
		out[f.Check] = f
	}
	return out
}

func TestDiagnoseOfAFileOpenedByOpenFindsNothingWrong(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all, err := b.Store.Diagnose(context.Background(), heraldspec.DiagnoseParams{})
	require.NoError(t, err)
	var checks []string
	for _, f := range all {
		require.Equal(t, heraldspec.SeverityOK, f.Severity, f)
		checks = append(checks, f.Check)
	}
	require.Equal(t, []string{"schema", "journal_mode", "busy_timeout", "synchronous", "free_pages", "wal_file"}, checks)
	require.Regexp(t, `^outbox table herald_outbox is at schema version \d+, this herald's$`, all[0].Message)
	require.Equal(t, "busy_timeout is 30s", all[2].Message)
	require.Equal(t, "synchronous is NORMAL", all[3].Message)
}

func TestDiagnoseOfAMissingTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := open(t, filepath.Join(t.TempDir(), "empty.db"))
	d, err := heraldsqlite.New(db, &heraldsqlite.Config{Table: "events"})
	require.NoError(t, err)
	got := diagnose(t, d)[heraldsqlite.CheckSchema]
	require.Equal(t, heraldspec.SeverityError, got.Severity)
	require.Equal(t, "outbox table events does not exist (no migration applied)", got.Message)
	require.Equal(t, "herald migrate --table events", got.Fix)
}

// A database opened without heraldsqlite.Open: a rollback journal, no busy
// timeout; then synchronous off.
func TestDiagnoseFindsARollbackJournalAndNoBusyTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "plain.db"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1) // the pragmas below are a connection's own
	d, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, d.Migrate(ctx))

	got := diagnose(t, d)
	require.Equal(t, heraldspec.SeverityError, got[heraldsqlite.CheckJournalMode].Severity)
	require.Equal(t, "journal_mode is delete, not wal: every claim of the relay blocks the producers' reads, and theirs the relay",
		got[heraldsqlite.CheckJournalMode].Message)
	require.Contains(t, got[heraldsqlite.CheckJournalMode].Fix, "PRAGMA journal_mode = WAL;")
	require.Equal(t, heraldspec.SeverityError, got[heraldsqlite.CheckBusyTimeout].Severity)
	require.Contains(t, got[heraldsqlite.CheckBusyTimeout].Message, "busy_timeout is 0")
	require.Contains(t, got[heraldsqlite.CheckBusyTimeout].Fix, "PRAGMA busy_timeout = 30000;")
	require.Equal(t, heraldspec.SeverityOK, got[heraldsqlite.CheckSynchronous].Severity)
	require.Equal(t, "synchronous is FULL", got[heraldsqlite.CheckSynchronous].Message)
	require.NotContains(t, got, heraldsqlite.CheckWALFile, "no write-ahead log, no finding on its file")

	for _, fix := range []string{"PRAGMA journal_mode = WAL", "PRAGMA busy_timeout = 1000", "PRAGMA synchronous = OFF"} {
		_, err := db.Exec(fix)
		require.NoError(t, err)
	}
	got = diagnose(t, d)
	require.Equal(t, heraldspec.SeverityOK, got[heraldsqlite.CheckJournalMode].Severity)
	require.Equal(t, heraldspec.SeverityWarning, got[heraldsqlite.CheckBusyTimeout].Severity)
	require.Contains(t, got[heraldsqlite.CheckBusyTimeout].Message, "busy_timeout is 1s:")
	require.Equal(t, heraldspec.SeverityWarning, got[heraldsqlite.CheckSynchronous].Severity)
	require.Contains(t, got[heraldsqlite.CheckSynchronous].Message, "synchronous is OFF")
	require.Equal(t, heraldspec.SeverityOK, got[heraldsqlite.CheckWALFile].Severity)
}

// 40 MiB written in one transaction and deleted: the write-ahead log file
// keeps the size that transaction gave it, the file its free pages.
func TestDiagnoseFindsABloatedFileAndWriteAheadLog(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.exec(t, `CREATE TABLE ballast (b BLOB)`)
	b.exec(t, `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 40)
		INSERT INTO ballast SELECT zeroblob(1 << 20) FROM c`)
	b.exec(t, `DELETE FROM ballast`)

	got := diagnose(t, b.Store)
	free := got[heraldsqlite.CheckFreePages]
	require.Equal(t, heraldspec.SeverityWarning, free.Severity, free)
	require.Regexp(t, `^4\d\.\d MiB of the file's 4\d\.\d MiB are free pages \(\d+ of \d+\): deleted events left it bloated$`, free.Message)
	require.Contains(t, free.Fix, "VACUUM;")
	wal := got[heraldsqlite.CheckWALFile]
	require.Equal(t, heraldspec.SeverityWarning, wal.Severity, wal)
	require.Regexp(t, `^the write-ahead log file is 4\d\.\d MiB: `, wal.Message)
	require.Contains(t, wal.Fix, "PRAGMA wal_checkpoint(TRUNCATE);")

	// The fixes clear both.
	b.exec(t, `VACUUM`)
	b.exec(t, `PRAGMA wal_checkpoint(TRUNCATE)`)
	got = diagnose(t, b.Store)
	require.Equal(t, heraldspec.SeverityOK, got[heraldsqlite.CheckFreePages].Severity, got[heraldsqlite.CheckFreePages])
	require.Equal(t, heraldspec.SeverityOK, got[heraldsqlite.CheckWALFile].Severity, got[heraldsqlite.CheckWALFile])
}
