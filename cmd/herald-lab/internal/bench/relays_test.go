package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/cmd/herald-lab/internal/bench"
	"github.com/herald-outbox/herald/internal/testenv"
)

// --relays 3: three relays drain one backlog together, to JetStream and to
// a publisher that records every call. Every event arrives exactly once,
// each key's events in commit order, and each relay published some of
// them.
func TestDrainWithThreeRelaysSharesTheWorkAndKeepsKeyOrder(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	rec, remove := bench.AddRecordingSink()
	defer remove()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const events, keys = 300, 30
	var stdout, stderr bytes.Buffer
	code := bench.Main(ctx, []string{"drain", "--db", dsn, "--json", "--to", "jetstream,record",
		"--events", strconv.Itoa(events), "--keys", strconv.Itoa(keys), "--batch-size", "10", "--relays", "3"}, &stdout, &stderr)
	require.Equal(t, 0, code, "stderr:\n%s", stderr.String())

	var res struct {
		OK     bool `json:"ok"`
		Config struct {
			Relays int `json:"relays"`
		} `json:"config"`
		Drain struct {
			Relays      int                     `json:"relays"`
			Targets     []bench.DrainTarget     `json:"targets"`
			Comparisons []bench.DrainComparison `json:"vs_ceiling"`
		} `json:"drain"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
	require.True(t, res.OK)
	require.Equal(t, 3, res.Config.Relays)
	require.Equal(t, 3, res.Drain.Relays)
	require.Len(t, res.Drain.Targets, 6, "Herald's relays and both ceilings, to each destination")
	require.Len(t, res.Drain.Comparisons, 2)

	var heralds int
	for _, tg := range res.Drain.Targets {
		require.True(t, tg.Verified, "%s %s", tg.Name, tg.System)
		require.EqualValues(t, events, tg.Published, "%s %s", tg.Name, tg.System)
		if tg.System != "herald" {
			require.Empty(t, tg.RelayPublished, "%s: the ceiling is one system", tg.Name)
			require.Nil(t, tg.KeyOrder, "%s: the ceiling does not keep key order", tg.Name)
			continue
		}
		heralds++
		require.Len(t, tg.RelayPublished, 3, tg.Name)
		var sum int64
		for i, n := range tg.RelayPublished {
			require.Positive(t, n, "%s: relay %d published nothing: the relays did not share the work", tg.Name, i+1)
			sum += n
		}
		require.EqualValues(t, events, sum, tg.Name)
		if tg.Name == "jetstream" {
			require.NotNil(t, tg.StreamMessages)
			require.EqualValues(t, events, *tg.StreamMessages)
			require.Equal(t, &bench.KeyOrder{Messages: events, Keys: keys}, tg.KeyOrder,
				"the stream read back: every event once, each key in order")
		}
	}
	require.Equal(t, 2, heralds)

	// What the relays handed the record destination, checked here
	// without the bench's own check: each event once, and each key's
	// aggregate ids (positions in the backlog) rising.
	drains, arrivals := rec.Drains(), rec.Arrivals()
	require.Len(t, drains, 3, "Herald's relays, then the ceiling and the minimal ceiling")
	require.Len(t, drains[0], events)
	for id, n := range drains[0] {
		require.Equal(t, 1, n, "event %s arrived %d times", id, n)
	}
	require.Len(t, arrivals[0], events)
	last := map[string]int{}
	for _, a := range arrivals[0] {
		pos, err := strconv.Atoi(a.AggregateID)
		require.NoError(t, err)
		require.Greater(t, pos, last[a.Key], "key %s: event %d arrived after %d", a.Key, pos, last[a.Key])
		last[a.Key] = pos
	}
	require.Len(t, last, keys)

	human := stderr.String()
	require.Contains(t, human, "3 relays, each with batch size 10")
	require.Regexp(t, `(?m)^     3 relays published \d+ \+ \d+ \+ \d+ events$`, human)
	require.Regexp(t, `(?m)^  jetstream: Herald at \d+\.\d\d of the ceiling`, human)
}

// The order check counts what breaks a key's order and nothing else.
func TestKeyOrderCheck(t *testing.T) {
	a := func(key string, pos int) bench.Arrival {
		return bench.Arrival{Key: key, AggregateID: strconv.Itoa(pos)}
	}
	for _, c := range []struct {
		name     string
		arrivals []bench.Arrival
		want     bench.KeyOrder
	}{
		{"KeysInterleavedEachInOrder", []bench.Arrival{a("a", 1), a("b", 2), a("a", 3), a("b", 4), a("c", 5)},
			bench.KeyOrder{Messages: 5, Keys: 3}},
		{"GapsAreNotDisorder", []bench.Arrival{a("a", 1), a("a", 7), a("a", 30)}, bench.KeyOrder{Messages: 3, Keys: 1}},
		{"ALaterEventFirst", []bench.Arrival{a("a", 1), a("b", 2), a("a", 5), a("a", 3), a("a", 6)},
			bench.KeyOrder{Messages: 5, Keys: 2, OutOfOrder: 1}},
		{"TheSameEventTwice", []bench.Arrival{a("a", 1), a("a", 1), a("a", 2)},
			bench.KeyOrder{Messages: 3, Keys: 1, Repeated: 1}},
		{"NoPosition", []bench.Arrival{a("a", 1), {Key: "a", AggregateID: "x"}},
			bench.KeyOrder{Messages: 2, Keys: 1, Unreadable: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := bench.KeyOrderOf(c.arrivals)
			require.Equal(t, c.want, got)
			require.Equal(t, c.want.OutOfOrder+c.want.Repeated+c.want.Unreadable > 0, len(got.Problems()) > 0)
		})
	}
}
