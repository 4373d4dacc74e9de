package heraldsqlite_test

import (
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/herald-outbox/herald/driver/heralddrivertest"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/driver/internal/sqlitetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle is what most tests need: a fresh migrated database file (db,
// store, writer) and the shared kit's helpers on it. The behaviour every
// driver shares is tested by driver/heralddrivertest; the tests here are
// SQLite's own.
type bundle struct {
	*sqlitetest.Outbox
	*heralddrivertest.Kit
}

func setup(t testing.TB) *bundle {
	t.Helper()
	o := sqlitetest.New(t, heraldsqlite.Config{})
	return &bundle{Outbox: o, Kit: heralddrivertest.NewKit(t, o.Driver)}
}

// open opens path and closes it at the end of the test.
func open(t testing.TB, path string) *sql.DB { return sqlitetest.Open(t, path) }

// count counts the outbox rows matching where, a condition in SQL.
func (b *bundle) count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.DB.QueryRow(`SELECT count(*) FROM herald_outbox WHERE `+where, args...).Scan(&n))
	return n
}

func (b *bundle) exec(t testing.TB, query string, args ...any) {
	t.Helper()
	_, err := b.DB.Exec(query, args...)
	require.NoError(t, err)
}
