package heraldtest_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldtest"
	itest "github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { itest.Main(m) }

// fakeT is a heraldtest.TB that records failures instead of failing the
// test, so that a test can check that an assertion fails, and with what.
// Like t.Fatalf, the kit's assertions stop at the first failure; unlike
// it, Fatalf here returns, and the assertion returns right after.
type fakeT struct {
	msgs []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

// requirePassed fails t if the assertion failed f.
func (f *fakeT) requirePassed(t *testing.T) {
	t.Helper()
	require.Empty(t, f.msgs, "the assertion failed")
}

// requireFailed fails t unless the assertion failed f exactly once with a
// message holding every fragment, and returns the message.
func (f *fakeT) requireFailed(t *testing.T, fragments ...string) string {
	t.Helper()
	require.Len(t, f.msgs, 1, "the assertion should have failed, once")
	for _, frag := range fragments {
		require.Contains(t, f.msgs[0], frag)
	}
	return f.msgs[0]
}

// outbox is one database and one way of holding transactions on it (pgx,
// database/sql), with the writer, the reader and the store of a test.
type outbox[TTx any] struct {
	begin    func(t *testing.T) TTx
	commit   func(t *testing.T, tx TTx)
	rollback func(t *testing.T, tx TTx)
	writer   *herald.Writer[TTx]
	reader   heraldtest.TxReader[TTx]
	store    heraldtest.Reader
}

// write writes msgs in tx.
func (o *outbox[TTx]) write(t *testing.T, tx TTx, msgs ...herald.Message) {
	t.Helper()
	require.NoError(t, o.writer.WriteTx(context.Background(), tx, msgs...))
}

// commitNew writes msgs in a transaction of their own and commits it.
func (o *outbox[TTx]) commitNew(t *testing.T, msgs ...herald.Message) {
	t.Helper()
	tx := o.begin(t)
	o.write(t, tx, msgs...)
	o.commit(t, tx)
}

func sqliteOutbox(t *testing.T) *outbox[*sql.Tx] {
	t.Helper()
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	r, err := heraldsqlite.NewReader(nil)
	require.NoError(t, err)
	return &outbox[*sql.Tx]{
		begin: func(t *testing.T) *sql.Tx {
			tx, err := db.BeginTx(context.Background(), nil)
			require.NoError(t, err)
			// A failed test must not leave the write lock held.
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx
		},
		commit:   func(t *testing.T, tx *sql.Tx) { require.NoError(t, tx.Commit()) },
		rollback: func(t *testing.T, tx *sql.Tx) { require.NoError(t, tx.Rollback()) },
		writer:   w, reader: r, store: store,
	}
}

func pgxOutbox(t *testing.T) *outbox[pgx.Tx] {
	t.Helper()
	pool := itest.PostgresPool(t)
	cfg := &heraldpg.Config{Schema: itest.Schema(t)}
	store, err := heraldpg.New(pool, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	w, err := heraldpg.NewWriter(cfg)
	require.NoError(t, err)
	r, err := heraldpg.NewReader(cfg)
	require.NoError(t, err)
	return &outbox[pgx.Tx]{
		begin: func(t *testing.T) pgx.Tx {
			tx, err := pool.Begin(context.Background())
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return tx
		},
		commit:   func(t *testing.T, tx pgx.Tx) { require.NoError(t, tx.Commit(context.Background())) },
		rollback: func(t *testing.T, tx pgx.Tx) { require.NoError(t, tx.Rollback(context.Background())) },
		writer:   w, reader: r, store: store,
	}
}

func pgSQLOutbox(t *testing.T) *outbox[*sql.Tx] {
	t.Helper()
	db, err := sql.Open("pgx", itest.PostgresDSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	cfg := &heraldpg.Config{Schema: itest.Schema(t)}
	store, err := heraldpg.NewSQL(db, cfg)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(context.Background()))
	w, err := heraldpg.NewSQLWriter(cfg)
	require.NoError(t, err)
	r, err := heraldpg.NewSQLReader(cfg)
	require.NoError(t, err)
	return &outbox[*sql.Tx]{
		begin: func(t *testing.T) *sql.Tx {
			tx, err := db.BeginTx(context.Background(), nil)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback() })
			return tx
		},
		commit:   func(t *testing.T, tx *sql.Tx) { require.NoError(t, tx.Commit()) },
		rollback: func(t *testing.T, tx *sql.Tx) { require.NoError(t, tx.Rollback()) },
		writer:   w, reader: r, store: store,
	}
}

// lines returns the lines of a failure message that contain s.
func lines(msg, s string) []string {
	var out []string
	for _, l := range strings.Split(msg, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
