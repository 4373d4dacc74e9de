package browsertest_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testToken is the page's admin token, which the test logs in with.
const testToken = "s3cret-admin-token-for-tests"

// prefix is where the service mounts the page.
const prefix = "/herald"

// bundle is a page over a fresh SQLite outbox, served as a service serves
// it: mounted under prefix in the service's own mux, beside its own routes.
type bundle struct {
	store  *heraldsqlite.Driver
	db     *sql.DB
	writer *herald.Writer[*sql.Tx]
	audit  *testenv.LogBuffer
	url    string // the page's root, without the trailing slash
}

// setup opens a migrated SQLite outbox in a temporary file and serves the
// page over it with testToken; edit changes the config.
func setup(t *testing.T, edit func(*heraldui.Config)) *bundle {
	t.Helper()
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(t.Context()))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	logs := &testenv.LogBuffer{}
	b := &bundle{store: store, db: db, writer: w, audit: &testenv.LogBuffer{}}
	cfg := heraldui.Config{
		Admin:  store,
		Prefix: prefix,
		Token:  testToken,
		Audit:  slog.New(slog.NewJSONHandler(b.audit, nil)),
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
	edit(&cfg)
	ui, err := heraldui.New(cfg)
	require.NoError(t, err)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the shop") })
	mux.Handle(prefix+"/", ui)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		if t.Failed() {
			t.Logf("page logs:\n%s", logs.String())
		}
	})
	b.url = srv.URL + prefix
	return b
}

// write commits msgs in one transaction and returns their ids.
func (b *bundle) write(t *testing.T, msgs ...herald.Message) []string {
	t.Helper()
	tx, err := b.db.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	ids := make([]string, len(msgs))
	for i := range msgs {
		if msgs[i].ID == "" {
			msgs[i].ID = herald.NewID()
		}
		ids[i] = msgs[i].ID
	}
	require.NoError(t, b.writer.WriteTx(t.Context(), tx, msgs...))
	require.NoError(t, tx.Commit())
	return ids
}

// state is an event's state, "gone" once it is deleted.
func (b *bundle) state(t *testing.T, id string) heraldadmin.State {
	t.Helper()
	row, err := b.store.GetEvent(t.Context(), id)
	if err != nil {
		require.ErrorIs(t, err, heraldadmin.ErrNotFound)
		return "gone"
	}
	return row.State
}

// auditLines returns the audit log's lines, decoded.
func (b *bundle) auditLines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(b.audit.String()) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// relaysStore is the SQLite store with heraldadmin.Relays, as a driver
// that records heartbeats offers it.
type relaysStore struct {
	*heraldsqlite.Driver
	relays []heraldadmin.RelayInfo
}

func (s relaysStore) ListRelays(context.Context) ([]heraldadmin.RelayInfo, error) {
	return s.relays, nil
}
