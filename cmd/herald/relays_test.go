package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// herald status and the admin server's /relays list the relays running on
// the table, from the database: a relay appears once it runs and is gone
// once it stops.
func TestStatusAndTheAdminServerListTheRunningRelays(t *testing.T) {
	t.Parallel()
	d := setup(t)
	statusOf := func() statusJSON {
		r := d.cli(t, "status", "--json")
		require.Equal(t, 0, r.code, r)
		var st statusJSON
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
		return st
	}
	require.NotNil(t, statusOf().Relays, "none running is an empty list, not null")
	require.Empty(t, statusOf().Relays)
	r := d.cli(t, "status")
	require.Contains(t, r.stdout, "relays: none running")

	ns := testenv.NATS(t)
	ns.CreateStream(t, "RELAYS", "orders.>")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan result, 1)
	go func() {
		done <- cliCtx(ctx, nil, nil, append([]string{"relay", "--publisher", ns.URL(), "--admin-addr", addr,
			"--poll-interval", "2ms", "--idle-poll-interval", "20ms"}, d.flags...)...)
	}()
	var st statusJSON
	require.Eventually(t, func() bool { st = statusOf(); return len(st.Relays) == 1 }, 30*time.Second, 20*time.Millisecond)
	relay := st.Relays[0]
	require.Regexp(t, `^.+/\d+$`, relay.Owner, "host/pid")
	require.NotEmpty(t, relay.Version)
	require.False(t, relay.StartedAt.IsZero())
	require.False(t, relay.HeartbeatAt.Before(relay.StartedAt))
	require.Nil(t, relay.LastClaimAt, "no event yet")

	r = d.cli(t, "status")
	require.Equal(t, 0, r.code, r)
	require.Regexp(t, `RELAY\s+VERSION\s+UP\s+LEASED\s+PUBLISHED\s+LAST CLAIM\n`+
		`\S+/\d+\s+\S+\s+\S+\s+0\s+0\s+none yet\n1 relay running`, r.stdout)

	code, body, err := get(addr, "/relays")
	require.NoError(t, err)
	require.Equal(t, 200, code, body)
	var rj relaysJSON
	require.NoError(t, json.Unmarshal([]byte(body), &rj))
	require.Len(t, rj.Relays, 1)
	require.Equal(t, relay.Owner, rj.Relays[0].Owner)
	require.True(t, rj.Relays[0].StartedAt.Equal(relay.StartedAt))

	cancel()
	require.Equal(t, 0, (<-done).code)
	st = statusOf()
	require.NotNil(t, st.Relays)
	require.Empty(t, st.Relays, "a stopped relay removes its heartbeat")
	require.Contains(t, d.cli(t, "status").stdout, "relays: none running")
}

func TestPrintRelays(t *testing.T) {
	t.Parallel()
	beat := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	claim := beat.Add(-3 * time.Second)
	var b bytes.Buffer
	printRelays(&b, []relayJSON{
		{Owner: "web-1/7", Version: "v0.4.0", StartedAt: beat.Add(-90 * time.Minute), HeartbeatAt: beat,
			LastClaimAt: &claim, Leased: 12, Published: 3400},
		{Owner: "evil\x1b[2J/1", Version: "(devel)", StartedAt: beat, HeartbeatAt: beat},
	})
	out := b.String()
	require.Regexp(t, `(?m)^web-1/7\s+v0\.4\.0\s+1h30m\s+12\s+3400\s+3s ago$`, out)
	require.Regexp(t, `(?m)^evil\S*/1\s+\(devel\)\s+0s\s+0\s+0\s+none yet$`, out)
	require.NotContains(t, out, "\x1b", "row text is escaped")
	require.Contains(t, out, "2 relays running")

	b.Reset()
	printRelays(&b, nil)
	require.Contains(t, b.String(), "relays: not recorded by this database's driver")
	require.False(t, strings.Contains(b.String(), "RELAY"))
}
