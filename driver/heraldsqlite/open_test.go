package heraldsqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
)

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreatesTheFileAndItsDirectory", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a", "b c", "outbox?#.db")
		db := open(t, path)
		require.NoError(t, db.PingContext(ctx))
		require.FileExists(t, path)
	})

	t.Run("ConfiguresEveryConnection", func(t *testing.T) {
		t.Parallel()
		db := open(t, filepath.Join(t.TempDir(), "outbox.db"))
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		defer conn.Close()
		for pragma, want := range map[string]string{
			"journal_mode": "wal", "busy_timeout": "30000", "synchronous": "1", "foreign_keys": "1",
		} {
			var got string
			require.NoError(t, conn.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got))
			require.Equal(t, want, got, pragma)
		}
	})

	t.Run("TransactionsTakeTheWriteLockAtBegin", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "outbox.db")
		db := open(t, path)
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		defer tx.Rollback()
		// A second process finds the lock taken although tx wrote nothing.
		other := open(t, path)
		_, err = other.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
		require.NoError(t, err)
		c, err := other.Conn(ctx)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.ExecContext(ctx, `PRAGMA busy_timeout = 0`)
		require.NoError(t, err)
		_, err = c.ExecContext(ctx, `CREATE TABLE t (x)`)
		require.ErrorContains(t, err, "locked")
	})

	t.Run("RefusesAFileThatIsNotADatabaseAndLeavesItUnchanged", func(t *testing.T) {
		t.Parallel()
		for _, content := range []string{"hello, not a database", "hi", "SQLite format 2 and then some text"} {
			dir := t.TempDir()
			path := filepath.Join(dir, "notes.txt")
			require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			_, err := heraldsqlite.Open(path)
			require.ErrorContains(t, err, "file is not a database")
			require.ErrorContains(t, err, path)
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, content, string(got))
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, entries, 1, "no -wal or -shm file beside it")
		}
	})

	t.Run("OpensAnEmptyFileAsANewDatabase", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "empty.db")
		require.NoError(t, os.WriteFile(path, nil, 0o600))
		db := open(t, path)
		d, err := heraldsqlite.New(db, nil)
		require.NoError(t, err)
		require.NoError(t, d.Migrate(ctx))
	})

	t.Run("FailsClearlyOnAPathUnderARegularFile", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
		path := filepath.Join(file, "sub", "outbox.db")
		_, err := heraldsqlite.Open(path)
		require.ErrorContains(t, err, "heraldsqlite: cannot open database "+path+": cannot create its directory")
		require.ErrorContains(t, err, "not a directory")
	})

	t.Run("FailsClearlyOnADirectory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_, err := heraldsqlite.Open(dir)
		require.ErrorContains(t, err, "cannot open database "+dir)
		require.ErrorContains(t, err, "is a directory")
	})

	t.Run("FailsClearlyOnAReadOnlyDirectory", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() == 0 {
			t.Skip("root writes into read-only directories")
		}
		dir := filepath.Join(t.TempDir(), "ro")
		require.NoError(t, os.Mkdir(dir, 0o500))
		path := filepath.Join(dir, "outbox.db")
		_, err := heraldsqlite.Open(path)
		require.ErrorContains(t, err, "cannot open database "+path)
		require.ErrorContains(t, err, "permission denied")
	})

	t.Run("RefusesWhatIsNotAFilePath", func(t *testing.T) {
		t.Parallel()
		for _, p := range []string{"", ":memory:", "file:x.db?mode=memory"} {
			_, err := heraldsqlite.Open(p)
			require.ErrorContains(t, err, "needs the path of a database file", p)
		}
	})
}
