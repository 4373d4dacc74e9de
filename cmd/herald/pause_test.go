package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestPauseAndResumeFromTheCLI(t *testing.T) {
	t.Parallel()
	d := setup(t)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders', 'a', 'x'), ('orders', 'b', 'x'), ('users', 'c', 'x')`)

	r := d.cli(t, "pause", "--topic", "orders", "--reason", "consumer migration")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `paused topic "orders": every relay stops claiming its events within 1s`)
	r = d.cli(t, "pause", "--destination", "kafka", "--force") // no relay has it: ahead of time
	require.Equal(t, 0, r.code, r)

	r = d.cli(t, "status")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `(?m)^PAUSED\s+NAME\s+WAITING\s+SINCE\s+BY\s+REASON$`, r.stdout)
	require.Regexp(t, `(?m)^topic\s+orders\s+2\s+.*herald CLI: .*consumer migration$`, r.stdout)
	require.Regexp(t, `(?m)^destination\s+kafka\s+\?\s`, r.stdout)
	require.Contains(t, r.stdout, "a destination's waiting events: add --relay-admin URL")

	r = d.cli(t, "status", "--json")
	require.Equal(t, 0, r.code, r)
	var st statusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Paused, 2)
	require.Equal(t, herald.PauseDestination, st.Paused[0].Kind)
	require.EqualValues(t, -1, st.Paused[0].Waiting, "which topics route to a destination, only the relay knows")
	require.Equal(t, pausedJSON{Kind: herald.PauseTopic, Name: "orders", Reason: "consumer migration", By: st.Paused[1].By,
		Since: st.Paused[1].Since, Waiting: 2}, st.Paused[1])
	require.WithinDuration(t, time.Now(), st.Paused[1].Since, time.Minute)

	r = d.cli(t, "resume", "--topic", "orders")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `resumed topic "orders"`)
	r = d.cli(t, "resume", "--topic", "orders")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, `topic "orders" was not paused; nothing changed`)
	r = d.cli(t, "status", "--json")
	require.Equal(t, 0, r.code, r)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Len(t, st.Paused, 1, "a resumed pause is not listed")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"pause"}, "give --topic T or --destination D"},
		{[]string{"pause", "--topic", "a", "--destination", "b"}, "not both"},
		{[]string{"pause", "--topic", " "}, "is not a topic name"},
		{[]string{"resume", "--destination", "a\tb"}, "is not a destination name"},
		{[]string{"pause", "--topic", "a", "extra"}, "extra"},
	} {
		r := d.cli(t, tc.args...)
		require.Equal(t, 2, r.code, r)
		require.Contains(t, r.stderr, tc.want)
	}
}

// A destination paused from the CLI holds its events in a running relay
// (the relay finds their topics as they come), the relay's admin server
// counts them in /metrics and herald status --relay-admin, and the resume
// lets them go.
func TestPausedDestinationInARunningRelay(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	ns.CreateStream(t, "PAUSE", "orders.>")
	addr := freeAddr(t)
	require.Equal(t, 0, d.cli(t, "pause", "--destination", "default", "--reason", "broker upgrade", "--force").code, "before the relay starts")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, nil, nil, append([]string{"relay", "--publisher", ns.URL(), "--admin-addr", addr,
			"--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)
	}()
	require.Eventually(t, func() bool {
		code, _, err := get(addr, "/readyz")
		return err == nil && code == 200
	}, 30*time.Second, 10*time.Millisecond)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) SELECT 'orders.placed', 'k', 'x' FROM generate_series(1, 5)`)

	var metrics string
	require.Eventually(t, func() bool {
		_, metrics, _ = get(addr, "/metrics")
		return strings.Contains(metrics, `herald_paused_waiting_events{kind="destination",name="default"} 5`)
	}, 30*time.Second, 20*time.Millisecond)
	require.Contains(t, metrics, `herald_paused{kind="destination",name="default"} 1`)
	require.NotContains(t, metrics, `herald_published_total{destination="default",topic="orders.placed"}`, "nothing of a paused destination is sent")

	var st statusJSON
	require.Eventually(t, func() bool {
		r := cli(t, nil, append([]string{"status", "--json", "--relay-admin", "http://" + addr}, d.flags...)...)
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && len(st.Paused) == 1 && st.Paused[0].Waiting == 5
	}, 30*time.Second, 20*time.Millisecond, "status counts what the destination holds through the relay")
	require.True(t, st.Destinations[0].Paused)

	r := d.cli(t, "resume", "--destination", "default")
	require.Equal(t, 0, r.code, r)
	require.Eventually(t, func() bool {
		_, metrics, _ = get(addr, "/metrics")
		return strings.Contains(metrics, `herald_published_total{destination="default",topic="orders.placed"} 5`)
	}, 30*time.Second, 20*time.Millisecond, "resumed, every held event is published")
	cancel()
	<-done
}
