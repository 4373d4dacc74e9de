package heraldui_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testToken is the admin token of the tests that configure one.
const testToken = "s3cret-admin-token-for-tests"

// bundle is a page over a fresh SQLite outbox.
type bundle struct {
	db     *sql.DB
	store  *heraldsqlite.Driver
	writer *herald.Writer[*sql.Tx]
	ui     http.Handler
	audit  *testenv.LogBuffer
	logs   *testenv.LogBuffer
}

// setup opens a migrated SQLite outbox in a temporary file and a page over
// it with the given token ("" for read-only); edit changes the config.
func setup(t *testing.T, token string, edit ...func(*heraldui.Config)) *bundle {
	t.Helper()
	db, err := heraldsqlite.Open(filepath.Join(t.TempDir(), "outbox.db"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	store, err := heraldsqlite.New(db, nil)
	require.NoError(t, err)
	require.NoError(t, store.Migrate(t.Context()))
	w, err := heraldsqlite.NewWriter(nil)
	require.NoError(t, err)
	b := &bundle{db: db, store: store, writer: w, audit: &testenv.LogBuffer{}, logs: &testenv.LogBuffer{}}
	cfg := heraldui.Config{
		Admin:  store,
		Token:  token,
		Audit:  slog.New(slog.NewJSONHandler(b.audit, nil)),
		Logger: slog.New(slog.NewTextHandler(b.logs, nil)),
	}
	for _, e := range edit {
		e(&cfg)
	}
	b.ui, err = heraldui.New(cfg)
	require.NoError(t, err)
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

// kill writes msgs and makes them dead the way a relay does: claimed, then
// completed with a permanent failure whose error is lastError. With park,
// each parks its key. Any other ready row claimed on the way is released.
func (b *bundle) kill(t *testing.T, park bool, lastError string, msgs ...herald.Message) []string {
	t.Helper()
	ids := b.write(t, msgs...)
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	token := uuid.NewString()
	envs, err := b.store.Claim(t.Context(), herald.ClaimParams{Token: token, Owner: "heraldui-test", Limit: 10000, Lease: time.Hour, Unordered: true})
	require.NoError(t, err)
	var failed []herald.Failure
	var dead []string
	for _, e := range envs {
		if want[e.ID] {
			outcome := herald.OutcomeDead
			if park {
				outcome = herald.OutcomeParked
			}
			failed = append(failed, herald.Failure{ID: e.ID, Outcome: outcome, Error: lastError})
			dead = append(dead, e.ID)
		} else {
			failed = append(failed, herald.Failure{ID: e.ID, Outcome: herald.OutcomeReleased})
		}
	}
	require.Len(t, dead, len(ids), "every written message was claimed")
	res, err := b.store.Complete(t.Context(), herald.CompleteParams{Token: token, Failed: failed})
	require.NoError(t, err)
	require.Len(t, res.Failed, len(envs))
	return ids
}

func (b *bundle) state(t *testing.T, id string) heraldadmin.State {
	t.Helper()
	row, err := b.store.GetEvent(t.Context(), id)
	if err != nil {
		require.ErrorIs(t, err, heraldadmin.ErrNotFound)
		return "gone"
	}
	return row.State
}

// response is a finished request.
type response struct {
	Code   int
	Header http.Header
	Body   string
}

// do serves one request. Options edit it (headers, cookies).
func (b *bundle) do(t *testing.T, method, target string, form url.Values, opts ...func(*http.Request)) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	r := httptest.NewRequestWithContext(t.Context(), method, target, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for _, o := range opts {
		o(r)
	}
	w := httptest.NewRecorder()
	b.ui.ServeHTTP(w, r)
	res := w.Result()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{Code: res.StatusCode, Header: res.Header, Body: string(raw)}
}

func (b *bundle) get(t *testing.T, target string, opts ...func(*http.Request)) response {
	t.Helper()
	return b.do(t, http.MethodGet, target, nil, opts...)
}

func (b *bundle) post(t *testing.T, target string, form url.Values, opts ...func(*http.Request)) response {
	t.Helper()
	return b.do(t, http.MethodPost, target, form, opts...)
}

func withBearer(token string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
}

func withHeader(name, value string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set(name, value) }
}

// session is a browser's login: its cookie and its CSRF token.
type session struct {
	cookie *http.Cookie
	csrf   string
}

func (s session) send(r *http.Request) { r.AddCookie(s.cookie) }

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs in with the form and reads the CSRF token off the next page.
func (b *bundle) login(t *testing.T) session {
	t.Helper()
	res := b.post(t, "/login", url.Values{"token": {testToken}})
	require.Equal(t, http.StatusSeeOther, res.Code, res.Body)
	cookies := (&http.Response{Header: res.Header}).Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	s := session{cookie: &http.Cookie{Name: c.Name, Value: c.Value}}
	page := b.get(t, "/", s.send)
	require.Equal(t, http.StatusOK, page.Code)
	m := csrfField.FindStringSubmatch(page.Body)
	require.NotNil(t, m, "a logged-in page carries the CSRF token (logout form)")
	s.csrf = m[1]
	return s
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

// fakeAdmin is a heraldadmin.Admin whose methods a test sets.
type fakeAdmin struct {
	BacklogFunc func(context.Context) ([]heraldadmin.TopicBacklog, error)
}

func (f *fakeAdmin) Status(context.Context) (heraldadmin.Status, error) {
	return heraldadmin.Status{}, nil
}
func (f *fakeAdmin) ListEvents(context.Context, heraldadmin.EventFilter) ([]heraldadmin.EventRow, error) {
	return nil, nil
}
func (f *fakeAdmin) GetEvent(context.Context, string) (heraldadmin.EventRow, error) {
	return heraldadmin.EventRow{}, heraldadmin.ErrNotFound
}
func (f *fakeAdmin) RequeueDead(context.Context, heraldadmin.EventFilter) (int, error) { return 0, nil }
func (f *fakeAdmin) DiscardDead(context.Context, heraldadmin.EventFilter) (int, error) { return 0, nil }
func (f *fakeAdmin) BlockedKeys(context.Context, int) ([]heraldadmin.BlockedKey, error) {
	return nil, nil
}
func (f *fakeAdmin) Backlog(ctx context.Context) ([]heraldadmin.TopicBacklog, error) {
	return f.BacklogFunc(ctx)
}
func (f *fakeAdmin) Pause(context.Context, heraldadmin.PauseParams) error { return nil }
func (f *fakeAdmin) Resume(context.Context, herald.PauseKind, string) (bool, error) {
	return false, nil
}
func (f *fakeAdmin) Pauses(context.Context) ([]herald.Pause, error) { return nil, nil }
