package heraldprom_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldprom"
	"github.com/herald-outbox/herald/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fakeAdmin serves Backlog from a function and counts the reads.
type fakeAdmin struct {
	heraldadmin.Admin
	reads   atomic.Int64
	backlog func() ([]heraldadmin.TopicBacklog, error)
	pauses  []herald.Pause
}

func (f *fakeAdmin) Pauses(context.Context) ([]herald.Pause, error) { return f.pauses, nil }

func (f *fakeAdmin) Backlog(context.Context) ([]heraldadmin.TopicBacklog, error) {
	f.reads.Add(1)
	return f.backlog()
}

type fakeRelay struct{ inFlight int64 }

func (r fakeRelay) Health() herald.Health { return herald.Health{Running: true} }
func (r fakeRelay) InFlight() int64       { return r.inFlight }

func scrape(t *testing.T, m *heraldprom.Metrics) string {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

func TestMetricsCountWhatTheRelayReports(t *testing.T) {
	t.Parallel()
	admin := &fakeAdmin{backlog: func() ([]heraldadmin.TopicBacklog, error) {
		return []heraldadmin.TopicBacklog{{Topic: "orders", Ready: 7, Claimed: 3, Dead: 2, ParkedKeys: 1, OldestPending: 90 * time.Second}}, nil
	}, pauses: []herald.Pause{
		{Kind: herald.PauseTopic, Name: "orders", Paused: true},
		{Kind: herald.PauseDestination, Name: "kafka", Paused: true},
		{Kind: herald.PauseTopic, Name: "billing", Resumed: time.Now()},
	}}
	destOf := map[string]string{"orders": "kafka", "billing": "ledger"}
	m, err := heraldprom.New(&heraldprom.Config{Admin: admin,
		Destinations:  func() []heraldprom.Destination { return []heraldprom.Destination{{Name: "kafka", Breaker: "open"}} },
		DestinationOf: func(topic string) string { return destOf[topic] }})
	require.NoError(t, err)
	m.Watch(fakeRelay{inFlight: 42})
	timed := m.Publisher("kafka", herald.PublisherFunc(func(context.Context, []herald.Envelope) error { return nil }))
	for range 3 {
		require.NoError(t, timed.Publish(context.Background(), nil))
	}
	refused := errors.New("refused")
	require.ErrorIs(t, m.Publisher("ledger", herald.PublisherFunc(func(context.Context, []herald.Envelope) error {
		return refused
	})).Publish(context.Background(), nil), refused, "the timed publisher returns what the publisher returned")

	created := time.Now().Add(-2 * time.Second)
	env := func(topic string, attempt int) herald.Envelope {
		return herald.Envelope{Message: herald.Message{ID: herald.NewID(), Topic: topic}, Attempt: attempt, CreatedAt: created}
	}
	m.Claimed(make([]herald.Envelope, 250))
	m.Acknowledged(herald.Acknowledgement{
		Published: []herald.Envelope{env("orders", 1), env("orders", 3), env("billing", 1)},
		Failed: []herald.FailedEvent{
			{Envelope: env("orders", 1), Outcome: herald.OutcomeRetry},
			{Envelope: env("orders", 1), Outcome: herald.OutcomeHeldBack},
			{Envelope: env("orders", 5), Outcome: herald.OutcomeParked},
		},
	})
	m.Rescued(4)

	text := scrape(t, m)
	for _, want := range []string{
		`herald_published_total{destination="kafka",topic="orders"} 2`,
		`herald_published_total{destination="ledger",topic="billing"} 1`,
		`herald_failed_total{destination="kafka",outcome="retry",topic="orders"} 1`,
		`herald_held_back_total{destination="kafka",topic="orders"} 1`,
		`herald_failed_total{destination="kafka",outcome="parked",topic="orders"} 1`,
		`herald_destination_publish_seconds_count{destination="kafka"} 3`,
		`herald_destination_publish_seconds_count{destination="ledger"} 1`,
		`herald_commit_to_ack_seconds_count 3`,
		`herald_commit_to_ack_seconds_bucket{le="1"} 0`,
		`herald_commit_to_ack_seconds_bucket{le="2.5"} 3`,
		`herald_publish_attempts_bucket{le="1"} 2`,
		`herald_publish_attempts_bucket{le="3"} 3`,
		`herald_claim_batch_size_bucket{le="250"} 1`,
		`herald_rescued_total 4`,
		`herald_relay_up 1`,
		`herald_relay_leased_events 42`,
		`herald_build_info{goversion="` + runtime.Version() + `",revision="",version="(devel)"} 1`,
		`herald_pending_events{topic="orders"} 10`,
		`herald_oldest_pending_seconds{topic="orders"} 90`,
		`herald_dead_events{topic="orders"} 2`,
		`herald_parked_keys{topic="orders"} 1`,
		`herald_destination_breaker{destination="kafka",state="open"} 1`,
		`herald_destination_breaker{destination="kafka",state="closed"} 0`,
		`herald_paused{kind="topic",name="orders"} 1`,
		`herald_paused{kind="destination",name="kafka"} 1`,
		`herald_paused_waiting_events{kind="topic",name="orders"} 7`,
		`herald_paused_waiting_events{kind="destination",name="kafka"} 7`,
	} {
		require.Contains(t, text, want)
	}
	require.NotContains(t, text, `outcome="held_back"`, "a held-back event did not fail")
	require.NotContains(t, text, `name="billing"`, "a resumed pause is not reported")
	// Every metric is documented in the manual's metrics table.
	doc := readMetricsDoc(t)
	for _, line := range strings.Split(text, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE herald_"); ok {
			name = "herald_" + strings.Fields(name)[0]
			require.True(t, strings.Contains(doc, "`"+name+"`"), "metric %s is not in %s", name, metricsDoc)
		}
	}
	lint, err := testutil.GatherAndLint(m.Registry())
	require.NoError(t, err)
	require.Empty(t, lint, "metric names and help follow Prometheus conventions")
}

func TestBacklogIsReadAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	admin := &fakeAdmin{backlog: func() ([]heraldadmin.TopicBacklog, error) {
		return []heraldadmin.TopicBacklog{{Topic: "t", Ready: 1}}, nil
	}}
	m, err := heraldprom.New(&heraldprom.Config{Admin: admin, BacklogInterval: time.Hour})
	require.NoError(t, err)
	for range 5 {
		require.Contains(t, scrape(t, m), `herald_pending_events{topic="t"} 1`)
	}
	require.EqualValues(t, 1, admin.reads.Load(), "five scrapes, one database read")
}

func TestAFailedBacklogReadKeepsTheLastFiguresAndHidesSecrets(t *testing.T) {
	t.Parallel()
	var fail atomic.Bool
	admin := &fakeAdmin{backlog: func() ([]heraldadmin.TopicBacklog, error) {
		if fail.Load() {
			return nil, errors.New("dial postgres://app:canary-s3cret@db:5432/shop: connection refused")
		}
		return []heraldadmin.TopicBacklog{{Topic: "t", Ready: 3}}, nil
	}}
	var log testenv.LogBuffer
	m, err := heraldprom.New(&heraldprom.Config{Admin: admin, BacklogInterval: time.Nanosecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	require.NoError(t, err)
	require.Contains(t, scrape(t, m), `herald_pending_events{topic="t"} 3`)
	fail.Store(true)
	text := scrape(t, m)
	require.Contains(t, text, `herald_pending_events{topic="t"} 3`, "the last figures stay; their timestamp shows their age")
	require.Contains(t, log.String(), "reading the backlog for metrics failed")
	require.NotContains(t, log.String(), "canary-s3cret")
	require.NotContains(t, text, "canary-s3cret")
}

func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	_, err := heraldprom.New(nil)
	require.ErrorContains(t, err, "Config.Admin")
	_, err = heraldprom.New(&heraldprom.Config{Admin: &fakeAdmin{}, BacklogInterval: -time.Second})
	require.ErrorContains(t, err, "BacklogInterval")
}

// metricsDoc is the page whose "Metrics and health" table lists every
// metric.
const metricsDoc = "../docs/operations.md"

func readMetricsDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(metricsDoc)
	require.NoError(t, err)
	return string(b)
}
