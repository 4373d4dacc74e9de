package faultsuite_test

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// session is a database session of a relay or producer, as
// pg_stat_activity shows it.
type session struct {
	port  int    // client_port: through a proxy, the proxy's side
	state string // active, idle, idle in transaction, ...
	query string // the statement running, or the last one
}

// sessions returns the sessions whose application_name is app.
func (w *world) sessions(t *testing.T, app string) []session {
	t.Helper()
	rows, err := w.pool.Query(t.Context(), `SELECT coalesce(client_port, 0), coalesce(state, ''), query
		FROM pg_stat_activity WHERE application_name = $1`, app)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (session, error) {
		var s session
		return s, r.Scan(&s.port, &s.state, &s.query)
	})
	require.NoError(t, err)
	return out
}

// waitIdle waits until no session of app runs a statement.
func (w *world) waitIdle(t *testing.T, app string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range w.sessions(t, app) {
			if s.state == "active" {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "a session of %s kept running a statement", app)
}

// Kinds of statements whose answer a fault can catch in flight.
const (
	claimInTx   = "claim, transaction open"
	claimCommit = "claim, committed"
	ack         = "acknowledgement"
	other       = "other"
)

// kind says which of the relay's statements query is.
func kind(query string) string {
	q := strings.TrimSpace(query)
	switch {
	case strings.Contains(q, "WITH RECURSIVE walk"), strings.Contains(q, "claim_token = $6"),
		strings.EqualFold(q, "begin"):
		// An ordered claim is a transaction: begin, a walk of the keys,
		// the claim of their rows, commit.
		return claimInTx
	case strings.EqualFold(q, "commit"):
		// Only claims use a transaction: this is a claim's commit.
		return claimCommit
	case strings.Contains(q, "SET state = 'published'"), strings.HasPrefix(q, "WITH f AS"):
		return ack
	}
	return other
}

// caught pauses the answers of app's sessions through px, and returns the
// kinds of the statements whose answers are then held: what a connection
// cut at this moment catches in flight. The answers stay paused.
func (w *world) caught(t *testing.T, px *testenv.Proxy, app string) []string {
	t.Helper()
	px.Pause(testenv.Downstream)
	w.waitIdle(t, app)
	held := map[int]bool{}
	for addr := range px.Held(testenv.Downstream) {
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		held[p] = true
	}
	var kinds []string
	for _, s := range w.sessions(t, app) {
		if held[s.port] {
			kinds = append(kinds, kind(s.query))
		}
	}
	return kinds
}
