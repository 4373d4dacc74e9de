package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

func TestSQLiteDSN(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "shop.db")

	t.Run("MigrateStatusAndDeadLetters", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "migrate", "--db", db)
		require.Equal(t, 0, r.code, r.stderr)
		r = cli(t, nil, "migrate", "--db", db)
		require.Equal(t, 0, r.code, r.stderr)
		r = cli(t, nil, "status", "--db", db, "--json")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, `"table"`)
		r = cli(t, nil, "dead", "list", "--db", db)
		require.Equal(t, 0, r.code, r.stderr)
	})

	t.Run("RefusesAFileThatIsNotADatabaseAndLeavesItUnchanged", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "notes.txt")
		require.NoError(t, os.WriteFile(path, []byte("hello, not a database"), 0o644))
		r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "not a SQLite database")
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, "hello, not a database", string(got))
		entries, err := os.ReadDir(filepath.Dir(path))
		require.NoError(t, err)
		require.Len(t, entries, 1, "no -wal or -shm file was created beside it")
	})

	t.Run("PrintSQLIsWhatMigrateRuns", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		path := filepath.Join(dir, "tool.db")
		r := cli(t, nil, "migrate", "--print-sql", "--db", "sqlite:"+path)
		require.Equal(t, 0, r.code, r.stderr)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Empty(t, entries, "printing connects to nothing")
		// Another tool runs the script; herald then finds the table at its version.
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		_, err = db.Exec(r.stdout)
		require.NoError(t, err)
		require.NoError(t, db.Close())
		r = cli(t, nil, "migrate", "--db", "sqlite:"+path)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "is up to date")
		r = cli(t, nil, "status", "--db", "sqlite:"+path)
		require.Equal(t, 0, r.code, r.stderr)
	})

	t.Run("OnlyMigrateCreatesTheFile", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		typo := filepath.Join(dir, "typo.db")
		for _, args := range [][]string{
			{"status"}, {"dead", "list"}, {"keys", "blocked"},
			{"relay", "--publisher", "nats://127.0.0.1:1"},
		} {
			r := cli(t, nil, append(args, "--db", "sqlite:"+typo)...)
			require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
			require.Equal(t, 1, countLines(r.stderr), r.stderr)
			require.Contains(t, r.stderr, "does not exist; herald migrate --db sqlite:"+typo+" creates it")
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Empty(t, entries, "%v created a file", args)
		}
		r := cli(t, nil, "migrate", "--db", "sqlite:"+typo)
		require.Equal(t, 0, r.code, r.stderr)
		r = cli(t, nil, "status", "--db", "sqlite:"+typo)
		require.Equal(t, 0, r.code, r.stderr)
	})

	t.Run("RefusesAPathThatCannotBeCreated", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "plain-file")
		require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
		r := cli(t, nil, "migrate", "--db", "sqlite:"+filepath.Join(file, "sub", "x.db"))
		require.NotEqual(t, 0, r.code)
		require.Equal(t, 1, countLines(r.stderr), r.stderr)
	})

	t.Run("RefusesADatabaseFromANewerSchemaVersionAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "future.db")
		r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
		require.Equal(t, 0, r.code, r.stderr)
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		_, err = db.Exec(`INSERT INTO herald_outbox_migrations (version, name) VALUES (999, 'from the future')`)
		require.NoError(t, err)
		require.NoError(t, db.Close())
		before, err := os.ReadFile(path)
		require.NoError(t, err)

		for _, args := range [][]string{{"migrate"}, {"status"}, {"dead", "list"}} {
			r = cli(t, nil, append(args, "--db", "sqlite:"+path)...)
			require.Equal(t, 1, r.code, "%v: %s", args, r)
			require.Contains(t, r.stderr, "newer than this Herald knows")
			require.Equal(t, 1, countLines(r.stderr), r.stderr)
		}
		after, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Equal(t, before, after, "the database file changed")
	})

	t.Run("RelayPublishesFromSQLite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "relay.db")
		r := cli(t, nil, "migrate", "--db", "sqlite:"+path)
		require.Equal(t, 0, r.code, r.stderr)
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		for i := range 120 {
			_, err := db.Exec(`INSERT INTO herald_outbox (topic, key, payload) VALUES ('orders.placed', ?, 'x')`, i)
			require.NoError(t, err)
		}
		require.NoError(t, db.Close())

		ns := testenv.NATS(t)
		stream := ns.CreateStream(t, "ORDERS", "orders.>")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan result, 1)
		go func() {
			done <- cliCtx(ctx, nil, nil, "relay", "--db", "sqlite:"+path, "--publisher", ns.URL(), "--log-level", "warn")
		}()
		require.Eventually(t, func() bool {
			info, err := stream.Info(context.Background())
			return err == nil && info.State.Msgs == 120
		}, 30*time.Second, 20*time.Millisecond)
		// Acknowledgements follow the PubAcks; stop once they are written.
		require.Eventually(t, func() bool {
			r := cli(t, nil, "status", "--db", "sqlite:"+path, "--json")
			return r.code == 0 && strings.Contains(r.stdout, `"published": 120`)
		}, 30*time.Second, 20*time.Millisecond)
		cancel()
		r = <-done
		require.Equal(t, 0, r.code, r.String())
		require.Contains(t, r.stdout, "relay stopped: 120 published")
	})

	t.Run("RefusesASchemaOrAnEmptyPath", func(t *testing.T) {
		t.Parallel()
		r := cli(t, nil, "status", "--db", db, "--schema", "other")
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, "SQLite has no schemas")
		r = cli(t, nil, "status", "--db", "sqlite:")
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, "needs a file path")
	})
}

func countLines(s string) int {
	n := 0
	for _, line := range strings.Split(s, "\n") {
		if line != "" {
			n++
		}
	}
	return n
}
