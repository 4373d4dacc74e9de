package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald/internal/testenv"
)

// writeKeyed writes n events of each key, in transactions of one event per
// key, numbered from first per key: payload "k:i".
func (w cdcWorld) writeKeyed(t *testing.T, keys, first, n int) {
	t.Helper()
	for i := first; i < first+n; i++ {
		_, err := w.db.Exec(context.Background(), fmt.Sprintf(`INSERT INTO herald_outbox (topic, key, payload)
			SELECT 'cdc.orders', 'k' || k, convert_to('k' || k || ':' || %d, 'UTF8') FROM generate_series(1, %d) k`, i, keys))
		require.NoError(t, err)
	}
}

// publishedBy reads the count a relay printed as it stopped.
func publishedBy(t *testing.T, r result) int {
	t.Helper()
	m := regexp.MustCompile(`relay stopped: (\d+) published`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// A table relayed by change-data-capture goes back to polling while it
// takes events: nothing is lost, nothing is published twice, and every
// key keeps its order across the three relays that carried it.
func TestSwitchingFromCDCBackToPollingLosesAndRepeatsNothing(t *testing.T) {
	testenv.Long(t)
	w := newCDCWorld(t)
	relayArgs := []string{"relay", "--db", w.dsn, "--publisher", w.nats.URL(), "--poll-interval", "2ms", "--idle-poll-interval", "20ms"}
	cdc := start(t, nil, append(relayArgs, "--source", "cdc", "--cdc-create-slot")...)
	require.Eventually(t, func() bool { return strings.Contains(w.insertState(t), "streamed") },
		60*time.Second, 20*time.Millisecond, "%s", cdc.stderr)

	const keys = 10
	w.writeKeyed(t, keys, 1, 30)
	r := cli(t, nil, "source", "poll", "--db", w.dsn, "--wait", "2m")
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "every streamed event is settled")
	require.Contains(t, w.insertState(t), "ready")

	// Polled now, by the CDC relay's own claims.
	w.writeKeyed(t, keys, 31, 30)
	require.Eventually(t, func() bool { return w.messages(t) >= 60*keys }, 2*time.Minute, 20*time.Millisecond)
	published := publishedBy(t, cdc.stop(t))

	poll := start(t, nil, relayArgs...)
	w.writeKeyed(t, keys, 61, 30)
	require.Eventually(t, func() bool { return w.messages(t) >= 90*keys }, 2*time.Minute, 20*time.Millisecond, "%s", poll.stderr)
	published += publishedBy(t, poll.stop(t))
	require.Equal(t, 90*keys, published, "each event was published once")

	last := map[string]int{}
	got := w.payloads(t)
	require.Len(t, got, 90*keys)
	for _, p := range got {
		key, n, _ := strings.Cut(p, ":")
		i, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.Equal(t, last[key]+1, i, "key %s: %d after %d", key, i, last[key])
		last[key] = i
	}
}

func TestSourcePollRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	lite := "sqlite:" + t.TempDir() + "/x.db"
	r := cli(t, nil, "migrate", "--db", lite)
	require.Equal(t, 0, r.code, r)
	r = cli(t, nil, "source", "poll", "--db", lite)
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, "herald source poll needs PostgreSQL")
	r = cli(t, nil, "source", "poll", "--db", lite, "--cdc-slot", "No-Such")
	require.Equal(t, exitUsage, r.code, r)
	require.Contains(t, r.stderr, `--cdc-slot: "No-Such" must match`)
}

// A slot dropped while no relay read it: the CDC relay refuses to start
// and says how to recover; the recovery makes the streamed rows it never
// read ready, a polling relay delivers them, and a new slot can be made.
func TestADroppedSlotIsRefusedAndRecovered(t *testing.T) {
	testenv.Long(t)
	w := newCDCWorld(t)
	cdcArgs := []string{"relay", "--db", w.dsn, "--publisher", w.nats.URL(), "--source", "cdc",
		"--poll-interval", "2ms", "--idle-poll-interval", "20ms"}
	cdc := start(t, nil, append(cdcArgs, "--cdc-create-slot")...)
	require.Eventually(t, func() bool { return strings.Contains(w.insertState(t), "streamed") },
		60*time.Second, 20*time.Millisecond, "%s", cdc.stderr)
	const keys = 5
	w.writeKeyed(t, keys, 1, 10)
	require.Eventually(t, func() bool { return w.messages(t) >= 10*keys }, time.Minute, 20*time.Millisecond)
	require.Equal(t, 0, cdc.stop(t).code)

	require.Eventually(t, func() bool {
		_, err := w.db.Exec(t.Context(), `SELECT pg_drop_replication_slot('herald_outbox')`)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond)
	w.writeKeyed(t, keys, 11, 10) // streamed rows no slot will ever hand out

	for _, args := range [][]string{cdcArgs, append(cdcArgs, "--cdc-create-slot")} {
		r := cli(t, nil, args...)
		require.NotEqual(t, 0, r.code, r)
		require.Contains(t, r.stderr, "replication slot herald_outbox does not exist, but Herald read from it up to")
	}
	r := cli(t, nil, cdcArgs...)
	m := regexp.MustCompile(`--requeue-since (\S+)`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, r)

	r = cli(t, nil, "source", "poll", "--db", w.dsn, "--requeue-since", m[1])
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "streamed rows written since")
	poll := start(t, nil, "relay", "--db", w.dsn, "--publisher", w.nats.URL(), "--poll-interval", "2ms", "--idle-poll-interval", "20ms")
	require.Eventually(t, func() bool { return w.messages(t) >= 20*keys }, time.Minute, 20*time.Millisecond, "%s", poll.stderr)
	require.Equal(t, 0, poll.stop(t).code)
	last := map[string]int{}
	for _, p := range w.payloads(t) {
		key, n, _ := strings.Cut(p, ":")
		i, err := strconv.Atoi(n)
		require.NoError(t, err)
		require.Equal(t, last[key]+1, i, "key %s: every event, in order, once on the stream (the requeued published ones were dropped by their ids)", key)
		last[key] = i
	}

	cdc = start(t, nil, append(cdcArgs, "--cdc-create-slot")...)
	require.Eventually(t, func() bool { return strings.Contains(w.insertState(t), "streamed") },
		60*time.Second, 20*time.Millisecond, "a new slot is made once the record is forgotten: %s", cdc.stderr)
	w.writeKeyed(t, keys, 21, 1)
	require.Eventually(t, func() bool { return w.messages(t) >= 21*keys }, time.Minute, 20*time.Millisecond)
	require.Equal(t, 0, cdc.stop(t).code)
}
