package main

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// However a row dies, the relay says so alike everywhere an operator
// looks: a row the claim could not read (a header that is a number) and a
// row that breaks WriteTx's rules (a topic with a control character) are
// each logged at ERROR with their id, and counted in the relay's summary,
// in its metrics and in `herald status`.
func TestEveryDeadRowIsLoggedAndCountedAlike(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload, headers) VALUES
		('orders.placed', 'k1', 'x', '{"n": 3}'),
		('orders' || chr(7), '', 'x', '{}'),
		('orders.placed', 'k2', 'x', '{}'),
		('orders.placed', 'k3', 'x', '{}'),
		('orders.placed', 'k4', 'x', '{}')`)

	addr := freeAddr(t)
	r := start(t, map[string]string{"HERALD_PUBLISHER": ns.URL()}, append([]string{"relay",
		"--nats-create-stream", "ORDERS", "--nats-stream-subjects", "orders.>", "--admin-addr", addr,
		"--log-format", "json", "--log-level", "warn", "--poll-interval", "2ms", "--idle-poll-interval", "20ms"},
		d.flags...)...)
	waitPublished(t, d, 3)
	var metrics string
	require.Eventually(t, func() bool {
		code, body, err := get(addr, "/metrics")
		metrics = body
		return err == nil && code == 200 && deadInMetrics(t, body) == 2
	}, 30*time.Second, 20*time.Millisecond, "herald_failed_total counts both dead rows")

	res := r.stop(t)
	require.Equal(t, 0, res.code, res)
	require.Equal(t, "relay stopped: 3 published, 0 retried, 2 dead, 0 released\n", res.stdout)

	dead := map[string]string{} // event id: error
	for _, line := range strings.Split(strings.TrimSpace(res.stderr), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "a line that is not JSON: %q", line)
		if rec["level"] == "ERROR" {
			id, _ := rec["event_id"].(string)
			require.NotEmpty(t, id, "an ERROR line names the event: %q", line)
			dead[id], _ = rec["error"].(string)
		}
	}
	require.Len(t, dead, 2, "each dead row logged at ERROR:\n%s", res.stderr)
	var reasons []string
	for _, why := range dead {
		reasons = append(reasons, why)
	}
	require.ElementsMatch(t, []string{
		`herald: unreadable row: header "n" is a number, not a string`,
		"permanent: invalid row: topic: contains whitespace or a control character",
	}, reasons)

	st := d.cli(t, "status", "--json")
	require.Equal(t, 0, st.code, st)
	var status struct {
		Totals map[string]int `json:"totals"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &status), st.stdout)
	require.Equal(t, 2, status.Totals["dead"], "herald status: %s", st.stdout)
	require.Equal(t, 2, deadInMetrics(t, metrics))
}

// deadInMetrics sums herald_failed_total over the outcomes that make an
// event dead.
func deadInMetrics(t *testing.T, exposition string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(exposition, "\n") {
		dead := strings.Contains(line, `outcome="dead"`) || strings.Contains(line, `outcome="parked"`)
		if !dead || !strings.HasPrefix(line, "herald_failed_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		n += int(v)
	}
	return n
}
