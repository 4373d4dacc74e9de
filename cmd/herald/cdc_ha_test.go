package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// The trickle the high-availability tests write while the relays hand
// over: haRows events over haKeys keys, in transactions of haPerTx, one
// every few milliseconds: some seconds of steady writes, faster than the
// relay publishes, so its batches are full. The batch size is no multiple
// of haPerTx: a source that filled batches by splitting transactions
// would leave one partly published at a graceful stop, which the standby
// sends again whole (the graceful test catches that).
const (
	haRows, haKeys, haPerTx = 20000, 100, 50
	haBatchSize             = "120"
)

// haPair is two CDC relays on one slot: a created it, b started once it
// streamed. Each has its own application_name, which the slot's walsender
// carries: that is how a test tells which child holds the slot (the
// walsender is a backend of the server, not the child's pid).
type haPair struct {
	w      cdcWorld
	relays map[string]*child
	admin  map[string]string // each relay's --admin-addr
}

func startHAPair(t *testing.T, w cdcWorld) haPair {
	t.Helper()
	p := haPair{w: w, relays: map[string]*child{}, admin: map[string]string{"relay-a": freeAddr(t), "relay-b": freeAddr(t)}}
	args := func(name string) []string {
		return []string{"relay", "--db", w.dsn + "&application_name=" + name, "--publisher", w.nats.URL(),
			"--source", "cdc", "--batch-size", haBatchSize, "--admin-addr", p.admin[name]}
	}
	p.relays["relay-a"] = startChild(t, append(args("relay-a"), "--cdc-create-slot")...)
	require.Eventually(t, func() bool { return p.holder(t) == "relay-a" }, 60*time.Second, 20*time.Millisecond,
		"relay-a creates the slot and streams it:\n%s", p.relays["relay-a"].out)
	p.relays["relay-b"] = startChild(t, args("relay-b")...)
	require.Eventually(t, func() bool {
		return strings.Contains(p.relays["relay-b"].out.String(), "standing by: slot herald_outbox is streamed by another relay (pid ")
	}, 60*time.Second, 20*time.Millisecond, "relay-b starts and stands by:\n%s", p.relays["relay-b"].out)
	require.Equal(t, "relay-a", p.holder(t))
	p.requireReader(t, "relay-a")
	return p
}

// requireReader checks that each relay's admin server tells whether it
// streams the slot: name says herald_cdc_reader_active 1 and cdc "active"
// in /readyz, the other (while it runs) 0 and "standby"; both are ready.
func (p haPair) requireReader(t *testing.T, name string) {
	t.Helper()
	for relay, want := range map[string]string{name: cdcActive, p.other(name): cdcStandby} {
		if c := p.relays[relay]; c.cmd.ProcessState != nil {
			continue // killed or stopped
		}
		gauge := map[string]string{cdcActive: "1", cdcStandby: "0"}[want]
		require.Eventually(t, func() bool {
			code, rj := readiness(t, p.admin[relay])
			return code == 200 && len(rj.Databases) == 1 && rj.Databases[0].CDC == want &&
				readerActive(t, p.admin[relay]) == gauge
		}, 30*time.Second, 20*time.Millisecond, "%s: /readyz says cdc %s and herald_cdc_reader_active %s", relay, want, gauge)
	}
}

// readerActive is the value of herald_cdc_reader_active on the relay's
// /metrics, "" when it has none or does not answer.
func readerActive(t *testing.T, addr string) string {
	t.Helper()
	code, body, err := get(addr, "/metrics")
	if err != nil || code != 200 {
		return ""
	}
	for line := range strings.SplitSeq(body, "\n") {
		if v, ok := strings.CutPrefix(line, `herald_cdc_reader_active{slot="herald_outbox"} `); ok {
			return v
		}
	}
	return ""
}

// holder is the application_name of the relay whose walsender streams the
// slot, "" when none does (or there is no slot yet).
func (p haPair) holder(t *testing.T) string {
	t.Helper()
	var name string
	err := p.w.db.QueryRow(context.Background(), `SELECT coalesce(a.application_name, '')
		FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid
		WHERE s.slot_name = 'herald_outbox'`).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return name
}

// other is the relay that is not name.
func (p haPair) other(name string) string {
	if name == "relay-a" {
		return "relay-b"
	}
	return "relay-a"
}

// trickle writes haRows events, "kK:N" with N from 1 up and K = N mod
// haKeys, in transactions of haPerTx, on a connection of its own; the
// function it returns waits until every transaction committed.
func (w cdcWorld) trickle(t *testing.T) (wait func() error) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), w.dsn)
	require.NoError(t, err)
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		defer conn.Close(context.Background())
		for from := 1; from <= haRows; from += haPerTx {
			_, werr = conn.Exec(context.Background(), fmt.Sprintf(`INSERT INTO herald_outbox (topic, key, payload)
				SELECT 'cdc.orders', 'k' || (g %% %d), convert_to('k' || (g %% %d) || ':' || g, 'UTF8')
				FROM generate_series($1::int, $2::int) g`, haKeys, haKeys), from, from+haPerTx-1)
			if werr != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { <-done })
	return func() error { <-done; return werr }
}

// requireEachEventOnceInKeyOrder checks that payloads hold each of the haRows
// events once, each key's in the order they were written.
func requireEachEventOnceInKeyOrder(t *testing.T, payloads []string) {
	t.Helper()
	last := map[string]int{}
	seen := map[string]bool{}
	for _, p := range payloads {
		key, n, ok := strings.Cut(p, ":")
		require.True(t, ok, p)
		i, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.False(t, seen[p], "%s twice", p)
		seen[p] = true
		require.Greater(t, i, last[key], "key %s: %d came after %d", key, i, last[key])
		last[key] = i
	}
	require.Len(t, seen, haRows)
}

// The relay that streams the slot is SIGKILLed while events are being
// written; the standby takes the slot over and every event is delivered,
// each key's in order. What the killed one had published and not
// confirmed comes again, and JetStream drops it by its Nats-Msg-Id.
func TestCDCStandbyTakesOverFromAKilledRelay(t *testing.T) {
	testenv.Long(t)
	w := newCDCWorld(t)
	p := startHAPair(t, w)
	written := w.trickle(t)

	require.Eventually(t, func() bool { return w.messages(t) >= 3000 }, 2*time.Minute, 5*time.Millisecond,
		"relay-a publishes:\n%s", p.relays["relay-a"].out)
	active := p.holder(t)
	require.NotEmpty(t, active)
	killed := time.Now()
	p.relays[active].kill(t)
	require.Less(t, w.messages(t), uint64(haRows), "killed midway, not after the end")

	standby := p.relays[p.other(active)]
	require.Eventually(t, func() bool { return p.holder(t) == p.other(active) }, 60*time.Second, 20*time.Millisecond,
		"the standby takes the slot:\n%s", standby.out)
	t.Logf("%s took the slot %s after %s was killed", p.other(active), time.Since(killed), active)
	// The walsender is there as soon as the slot is taken; the line comes
	// once the stream is open, a moment later.
	require.Eventually(t, func() bool { return strings.Contains(standby.out.String(), "took over slot herald_outbox") },
		30*time.Second, 20*time.Millisecond, "the standby says it took over:\n%s", standby.out)
	p.requireReader(t, p.other(active))
	require.Equal(t, 1, strings.Count(standby.out.String(), "took over slot herald_outbox"), standby.out.String())

	require.NoError(t, written())
	require.Eventually(t, func() bool { return w.messages(t) >= haRows }, 3*time.Minute, 50*time.Millisecond,
		"the standby delivers the rest:\n%s", standby.out)
	require.Equal(t, 0, standby.stop(t), standby.out.String())
	require.EqualValues(t, haRows, w.messages(t), "the redelivered events were dropped by their ids")
	requireEachEventOnceInKeyOrder(t, w.payloads(t))
}

// The relay that streams the slot gets SIGTERM while events are being
// written: it finishes its batch, confirms it, and releases the slot; the
// standby goes on from there. Nothing is published twice: not only does
// the stream hold each event once (JetStream would drop a duplicate by its
// id), no event was even sent twice. A plain NATS subscription on the
// stream's subjects sees every publish, duplicates that JetStream then
// drops included: a JetStream publish is a NATS message on its subject,
// and the dedup happens in the stream, after delivery to subscribers. (A
// small duplicates window cannot show them: NATS refuses one under 100ms,
// and the standby can take over faster than that.)
func TestCDCGracefulHandoverPublishesNothingTwice(t *testing.T) {
	testenv.Long(t)
	w := newCDCWorld(t)
	var (
		mu    sync.Mutex
		sends = map[string]int{}
	)
	nc := w.nats.Conn(t)
	sub, err := nc.Subscribe("cdc.>", func(m *nats.Msg) {
		mu.Lock()
		sends[string(m.Data)]++
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, sub.SetPendingLimits(-1, -1))
	require.NoError(t, nc.Flush())

	p := startHAPair(t, w)
	written := w.trickle(t)

	require.Eventually(t, func() bool { return w.messages(t) >= 3000 }, 2*time.Minute, 5*time.Millisecond,
		"relay-a publishes:\n%s", p.relays["relay-a"].out)
	active := p.holder(t)
	require.NotEmpty(t, active)
	stopped := time.Now()
	require.Equal(t, 0, p.relays[active].stop(t), p.relays[active].out.String())
	t.Logf("%s stopped in %s", active, time.Since(stopped))
	require.Less(t, w.messages(t), uint64(haRows), "stopped midway, not after the end")

	standby := p.relays[p.other(active)]
	require.Eventually(t, func() bool { return p.holder(t) == p.other(active) }, 60*time.Second, 20*time.Millisecond,
		"the standby takes the slot:\n%s", standby.out)
	t.Logf("%s took the slot %s after %s got SIGTERM", p.other(active), time.Since(stopped), active)
	p.requireReader(t, p.other(active))

	require.NoError(t, written())
	require.Eventually(t, func() bool { return w.messages(t) >= haRows }, 3*time.Minute, 50*time.Millisecond,
		"the standby delivers the rest:\n%s", standby.out)
	require.Equal(t, 0, standby.stop(t), standby.out.String())
	require.EqualValues(t, haRows, w.messages(t))
	requireEachEventOnceInKeyOrder(t, w.payloads(t))

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		pending, _, err := sub.Pending()
		return err == nil && pending == 0 && len(sends) == haRows
	}, 30*time.Second, 10*time.Millisecond, "the subscription saw every event")
	dropped, err := sub.Dropped()
	require.NoError(t, err)
	require.Zero(t, dropped, "the subscription saw every publish")
	mu.Lock()
	defer mu.Unlock()
	var twice []string
	for payload, n := range sends {
		if n != 1 {
			twice = append(twice, fmt.Sprintf("%s (%d times)", payload, n))
		}
	}
	require.Empty(t, twice, "events sent more than once; relay-a's log:\n%s\nrelay-b's log:\n%s",
		p.relays["relay-a"].out, p.relays["relay-b"].out)
}
