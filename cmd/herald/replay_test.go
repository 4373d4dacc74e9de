package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
	"github.com/herald-outbox/herald/publish/heraldwebhook"
)

// published inserts events as if a relay had published them (published_at
// ago, in this order) and returns their ids.
func (d db) published(t *testing.T, ago time.Duration, events ...[3]string) []string {
	t.Helper()
	var ids []string
	for _, e := range events {
		id := herald.NewID()
		d.exec(t, `INSERT INTO %s.herald_outbox (id, topic, key, type, payload, state, attempts, published_at, created_at)
			VALUES ($1, $2, $3, $4, $5, 'published', 1, now() - $6::interval, now() - $6::interval)`,
			id, e[0], e[1], e[2], []byte(e[0]+"/"+e[1]+"/"+e[2]), fmt.Sprintf("%d microseconds", ago.Microseconds()))
		ids = append(ids, id)
		ago -= time.Millisecond
	}
	return ids
}

// streamMessages reads every message of a JetStream stream, in order.
func streamMessages(t *testing.T, ns *testenv.NATSServer, stream string) []*nats.Msg {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(context.Background(), stream)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	var out []*nats.Msg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		require.NoError(t, err)
		out = append(out, &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data})
	}
	return out
}

func TestReplayRepublishesPublishedEventsInOrder(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	ns.CreateStream(t, "REPLAY", "orders.>", "billing.>")
	early := d.published(t, 3*time.Hour,
		[3]string{"orders.placed", "k1", "OrderPlaced"}, [3]string{"orders.placed", "k2", "OrderPlaced"},
		[3]string{"billing.invoiced", "", "Invoiced"}, [3]string{"orders.placed", "k1", "OrderPaid"})
	late := d.published(t, 10*time.Minute, [3]string{"orders.placed", "k1", "OrderShipped"}, [3]string{"billing.invoiced", "", "Invoiced"})
	// Neither waiting nor dead events are replayed.
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload) VALUES ('orders.placed', 'k1', 'waiting')`)
	d.exec(t, `INSERT INTO %s.herald_outbox (topic, key, payload, state, dead_at, last_error) VALUES ('orders.placed', 'k1', 'dead', 'dead', now(), 'x')`)
	replay := func(env map[string]string, args ...string) result {
		t.Helper()
		return cli(t, env, append(append([]string{"replay"}, args...), d.flags...)...)
	}

	t.Run("a dry run counts by topic and destination and publishes nothing", func(t *testing.T) {
		r := replay(nil, "--all", "--dry-run", "--publisher", ns.URL())
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "would replay 6 events (dry run: nothing was published)")
		require.Regexp(t, `billing\.invoiced\s+default\s+2\n`, r.stdout)
		require.Regexp(t, `orders\.placed\s+default\s+4\n`, r.stdout)
		require.Contains(t, r.stderr, `msg="replay dry run"`, "the audit log says who counted what")
		require.Contains(t, r.stderr, "component=herald.audit")
		r = replay(nil, "--topic", "orders.placed", "--since", "1h", "--dry-run")
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "would replay 1 event")
		require.Regexp(t, `orders\.placed\s+1\n`, r.stdout, "without destinations, none is named")
		require.Empty(t, streamMessages(t, ns, "REPLAY"))
	})

	t.Run("a key's events go out again in their order, with their ids", func(t *testing.T) {
		r := replay(nil, "--topic", "orders.placed", "--key", "k1", "--publisher", ns.URL())
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "replayed 3 events (default 3)")
		require.Contains(t, r.stderr, `msg="replay finished"`)
		require.Contains(t, r.stderr, "events=3")
		msgs := streamMessages(t, ns, "REPLAY")
		require.Len(t, msgs, 3)
		for i, want := range []string{early[0], early[3], late[0]} {
			require.Equal(t, want, msgs[i].Header.Get(herald.HeaderID))
		}
		require.Equal(t, "orders.placed/k1/OrderShipped", string(msgs[2].Data))
	})

	t.Run("with --new-ids the same events go out under new ids", func(t *testing.T) {
		before := len(streamMessages(t, ns, "REPLAY"))
		r := replay(nil, "--new-ids", "--publisher", ns.URL(), early[2], late[1])
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "replayed 2 events")
		msgs := streamMessages(t, ns, "REPLAY")[before:]
		require.Len(t, msgs, 2)
		for _, m := range msgs {
			require.NotContains(t, []string{early[2], late[1]}, m.Header.Get(herald.HeaderID))
			require.Equal(t, "billing.invoiced//Invoiced", string(m.Data))
		}
	})

	t.Run("a replay is paced by --rate", func(t *testing.T) {
		start := time.Now()
		r := replay(nil, "--all", "--rate", "5", "--batch-size", "1", "--new-ids", "--publisher", ns.URL())
		require.Equal(t, 0, r.code, r)
		require.Contains(t, r.stdout, "replayed 6 events")
		// A lower bound only: 6 events at 5 a second cannot take less
		// than 1.2s, however fast the machine.
		require.GreaterOrEqual(t, time.Since(start), 1200*time.Millisecond)
	})
}

// --to sends the selection to another destination; a refusal stops the
// replay at the first event not confirmed, and --after resumes there.
func TestReplayToAnotherDestinationStopsAndResumes(t *testing.T) {
	t.Parallel()
	d := setup(t)
	ns := testenv.NATS(t)
	ids := d.published(t, time.Hour, [3]string{"orders.placed", "k1", "A"}, [3]string{"orders.placed", "k1", "B"},
		[3]string{"orders.placed", "k1", "C"})
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	var (
		mu       sync.Mutex
		received []string
		refuse   = "orders.placed/k1/B"
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := heraldwebhook.Verify(secret, r.Header, body, time.Minute); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var ev struct {
			Payload []byte `json:"payload"`
		}
		_ = json.Unmarshal(body, &ev)
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(string(body), refuse) || strings.Contains(string(ev.Payload), refuse) {
			http.Error(w, "refused", http.StatusBadRequest)
			return
		}
		received = append(received, r.Header.Get("webhook-id"))
	}))
	t.Cleanup(hook.Close)
	env := map[string]string{"HERALD_WEBHOOK_SECRET": secret, "HERALD_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}
	args := func(extra ...string) []string {
		return append(append([]string{"replay", "--destination", "events=" + ns.URL(), "--destination", "hook=" + hook.URL,
			"--route", "orders.*=events", "--to", "hook", "--batch-size", "1"}, extra...), d.flags...)
	}

	r := cli(t, env, args("--topic", "orders.placed")...)
	require.Equal(t, 1, r.code, r)
	require.Contains(t, r.stdout, "replayed 1 event (hook 1)")
	require.Contains(t, r.stderr, "replay stopped at event "+ids[1])
	resume := regexp.MustCompile(`resume with --after (\S+)`).FindStringSubmatch(r.stderr)
	require.NotNil(t, resume, r.stderr)

	mu.Lock()
	refuse = "nothing"
	mu.Unlock()
	r = cli(t, env, args("--topic", "orders.placed", "--after", resume[1])...)
	require.Equal(t, 0, r.code, r)
	require.Contains(t, r.stdout, "replayed 2 events (hook 2)")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, received, 3, "each event reached the webhook once, in order")
}

func TestReplayRefusesAnUnclearSelection(t *testing.T) {
	t.Parallel()
	db := []string{"--db", "postgres://127.0.0.1:1/db", "--publisher", "nats://127.0.0.1:1"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"nothing selected", nil, "select the events to replay"},
		{"--all with a selector", []string{"--all", "--topic", "t"}, "--all selects every published event: give it alone"},
		{"a time that is neither", []string{"--since", "yesterday"}, `--since: "yesterday" is neither an RFC 3339 time`},
		{"an empty range", []string{"--since", "1h", "--until", "2h"}, "--since must be before --until"},
		{"an unknown destination", []string{"--all", "--to", "nope"}, `--to: "nope" is not a destination`},
		{"a bad position", []string{"--all", "--after", "yesterday"}, `--after: "yesterday" is not a position`},
		{"no rate", []string{"--all", "--rate", "0"}, "--rate: 0 is not positive"},
		{"a batch too big", []string{"--all", "--batch-size", "5000"}, "--batch-size: 5000 is not between 1 and 1000"},
		{"a bad id", []string{"not-an-id"}, `"not-an-id" is not an event id`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := cli(t, nil, append(append([]string{"replay"}, tc.args...), db...)...)
			require.Equal(t, 2, r.code, r)
			require.Contains(t, r.stderr, tc.want)
		})
	}
	// HERALD_ALL in the environment never selects anything.
	r := cli(t, map[string]string{"HERALD_ALL": "true"}, append([]string{"replay"}, db...)...)
	require.Equal(t, 2, r.code, r)
	require.Contains(t, r.stderr, "select the events to replay")
}
