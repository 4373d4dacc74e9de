// Package heraldprom exposes a relay's work and its outbox's backlog as
// Prometheus metrics, on a registry of its own (never the global default).
//
// Metrics gives the relay an Observer (RelayConfig.Observer) that counts
// what the relay does, and reads the outbox's backlog (Admin.Backlog: the
// waiting and dead rows only, through their partial indexes) at most once
// per BacklogInterval, however often Prometheus scrapes. Every name starts
// with herald_; the README lists them all.
package heraldprom

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/buildinfo"
)

// Config configures Metrics.
type Config struct {
	// Admin reads the backlog. Required.
	Admin heraldadmin.Admin
	// BacklogInterval is the least time between two backlog reads; scrapes
	// in between see the last one. Defaults to 10s.
	BacklogInterval time.Duration
	// BacklogTimeout bounds one backlog read. Defaults to 5s.
	BacklogTimeout time.Duration
	// Destinations, when set, reports each destination's circuit breaker
	// (heraldroute.Router.Status does). Defaults to none.
	Destinations func() []Destination
	// DestinationOf names the destination of a topic's events (a
	// heraldroute.Router's DestinationOf), for the destination label of
	// herald_published_total, herald_failed_total and
	// herald_held_back_total, and for the events a paused destination
	// holds. Defaults to none: the label is empty, and a paused destination
	// is reported without its count.
	DestinationOf func(topic string) string
	// Logger receives backlog read failures. Defaults to slog.Default().
	Logger *slog.Logger
}

// Destination is a destination's breaker state, as heraldroute reports it.
type Destination struct {
	Name    string
	Breaker string // closed, open or half-open
}

// Metrics is a relay's metrics and the registry that holds them.
type Metrics struct {
	reg *prometheus.Registry

	published *prometheus.CounterVec
	failed    *prometheus.CounterVec
	heldBack  *prometheus.CounterVec
	latency   prometheus.Histogram
	attempts  prometheus.Histogram
	batchSize prometheus.Histogram
	rescued   prometheus.Counter
	callTime  *prometheus.HistogramVec
	destOf    func(topic string) string

	relayMu sync.Mutex
	relay   Relay // set by Watch

	backlog *backlogCollector
}

// New builds the metrics and their registry.
func New(cfg *Config) (*Metrics, error) {
	if cfg == nil || cfg.Admin == nil {
		return nil, errors.New("heraldprom: Config.Admin is required")
	}
	if cfg.BacklogInterval < 0 || cfg.BacklogTimeout < 0 {
		return nil, errors.New("heraldprom: Config.BacklogInterval and BacklogTimeout must not be negative")
	}
	c := *cfg
	if c.BacklogInterval == 0 {
		c.BacklogInterval = 10 * time.Second
	}
	if c.BacklogTimeout == 0 {
		c.BacklogTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	m := &Metrics{reg: prometheus.NewRegistry(), destOf: c.DestinationOf}
	if m.destOf == nil {
		m.destOf = func(string) string { return "" }
	}
	m.published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_published_total", Help: "Events the broker confirmed, by topic and destination.",
	}, []string{"topic", "destination"})
	m.failed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_failed_total",
		Help: "Events that failed, by topic, destination and outcome: retry, outage, dead, parked.",
	}, []string{"topic", "destination", "outcome"})
	m.heldBack = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_held_back_total",
		Help: "Events not sent because an earlier event of their key failed in the same batch, by topic and destination: they did not fail themselves.",
	}, []string{"topic", "destination"})
	m.callTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "herald_destination_publish_seconds",
		Help:    "Time a destination took to answer one publish call (a batch, or a destination's share of one), by destination.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"destination"})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_commit_to_ack_seconds",
		Help:    "Time from an event's write (created_at) to the broker's confirmation being recorded.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
	m.attempts = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_publish_attempts",
		Help:    "Attempts an event took until the broker confirmed it.",
		Buckets: []float64{1, 2, 3, 5, 10, 25},
	})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_claim_batch_size",
		Help:    "Events per claimed batch.",
		Buckets: []float64{1, 10, 50, 100, 250, 500, 1000, 5000},
	})
	m.rescued = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "herald_rescued_total", Help: "Claimed rows returned to ready after their relay's lease expired.",
	})
	relayUp := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_relay_up", Help: "1 while the relay runs.",
	}, func() float64 {
		if up, _ := m.relayState(); up {
			return 1
		}
		return 0
	})
	leased := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "herald_relay_leased_events", Help: "Claimed rows this relay holds under its lease now.",
	}, func() float64 { _, n := m.relayState(); return float64(n) })
	m.backlog = newBacklogCollector(c)
	bi := buildinfo.Read()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "herald_build_info", Help: "1, labelled with the Herald version, its commit (checkout builds) and the Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Revision, "goversion": bi.GoVersion},
	})
	build.Set(1)
	m.reg.MustRegister(m.published, m.failed, m.heldBack, m.callTime, m.latency, m.attempts, m.batchSize, m.rescued, relayUp, leased, m.backlog, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m, nil
}

// Registry returns the metrics' registry.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Relay is what Metrics reads from a running relay: *herald.Relay.
type Relay interface {
	Health() herald.Health
	InFlight() int64
}

// Watch makes herald_relay_up and herald_relay_leased_events follow r.
func (m *Metrics) Watch(r Relay) {
	m.relayMu.Lock()
	defer m.relayMu.Unlock()
	m.relay = r
}

func (m *Metrics) relayState() (up bool, inFlight int64) {
	m.relayMu.Lock()
	r := m.relay
	m.relayMu.Unlock()
	if r == nil {
		return false, 0
	}
	return r.Health().Running, r.InFlight()
}

// Metrics implements every hook of a herald.Observer.
var (
	_ herald.ClaimedHook      = (*Metrics)(nil)
	_ herald.AcknowledgedHook = (*Metrics)(nil)
	_ herald.RescuedHook      = (*Metrics)(nil)
)

// Claimed implements herald.ClaimedHook.
func (m *Metrics) Claimed(batch []herald.Envelope) { m.batchSize.Observe(float64(len(batch))) }

// Acknowledged implements herald.AcknowledgedHook.
func (m *Metrics) Acknowledged(a herald.Acknowledgement) {
	now := time.Now()
	for _, e := range a.Published {
		m.published.WithLabelValues(e.Topic, m.destOf(e.Topic)).Inc()
		m.attempts.Observe(float64(e.Attempt))
		if !e.CreatedAt.IsZero() {
			m.latency.Observe(max(now.Sub(e.CreatedAt), 0).Seconds())
		}
	}
	for _, f := range a.Failed {
		if f.Outcome == herald.OutcomeHeldBack {
			m.heldBack.WithLabelValues(f.Topic, m.destOf(f.Topic)).Inc()
			continue
		}
		m.failed.WithLabelValues(f.Topic, m.destOf(f.Topic), string(f.Outcome)).Inc()
	}
}

// Publisher returns p timed: every Publish call's duration goes to
// herald_destination_publish_seconds under the destination label name.
func (m *Metrics) Publisher(name string, p herald.Publisher) herald.Publisher {
	h := m.callTime.WithLabelValues(name)
	return herald.PublisherFunc(func(ctx context.Context, batch []herald.Envelope) error {
		start := time.Now()
		err := p.Publish(ctx, batch)
		h.Observe(time.Since(start).Seconds())
		return err
	})
}

// Rescued implements herald.RescuedHook.
func (m *Metrics) Rescued(n int) { m.rescued.Add(float64(n)) }

// backlogCollector reads Admin.Backlog at most once per interval.
type backlogCollector struct {
	cfg Config

	pending, oldest, dead, parked, lastRead, breaker, paused, pausedWaiting *prometheus.Desc

	mu     sync.Mutex
	at     time.Time // when last read successfully
	last   []heraldadmin.TopicBacklog
	pauses []herald.Pause
}

func newBacklogCollector(cfg Config) *backlogCollector {
	return &backlogCollector{
		cfg: cfg,
		pending: prometheus.NewDesc("herald_pending_events",
			"Events waiting to be published (ready or claimed), by topic.", []string{"topic"}, nil),
		oldest: prometheus.NewDesc("herald_oldest_pending_seconds",
			"Age of the oldest event waiting to be published, by topic: the outbox's SLO signal.", []string{"topic"}, nil),
		dead: prometheus.NewDesc("herald_dead_events",
			"Dead events waiting for an operator, by topic.", []string{"topic"}, nil),
		parked: prometheus.NewDesc("herald_parked_keys",
			"Keys parked behind a dead event, by topic.", []string{"topic"}, nil),
		lastRead: prometheus.NewDesc("herald_backlog_read_timestamp_seconds",
			"When the backlog figures were last read from the database.", nil, nil),
		breaker: prometheus.NewDesc("herald_destination_breaker",
			"1 for each destination's current circuit breaker state: closed, open or half-open.", []string{"destination", "state"}, nil),
		paused: prometheus.NewDesc("herald_paused",
			"1 for each topic or destination an operator paused (herald pause).", []string{"kind", "name"}, nil),
		pausedWaiting: prometheus.NewDesc("herald_paused_waiting_events",
			"Ready events a pause holds, by what is paused.", []string{"kind", "name"}, nil),
	}
}

func (b *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{b.pending, b.oldest, b.dead, b.parked, b.lastRead, b.breaker, b.paused, b.pausedWaiting} {
		ch <- d
	}
}

func (b *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	rows, pauses, at := b.read()
	for _, h := range heraldadmin.HeldBy(pauses, rows, b.cfg.DestinationOf) {
		ch <- prometheus.MustNewConstMetric(b.paused, prometheus.GaugeValue, 1, string(h.Kind), h.Name)
		if h.Waiting >= 0 {
			ch <- prometheus.MustNewConstMetric(b.pausedWaiting, prometheus.GaugeValue, float64(h.Waiting), string(h.Kind), h.Name)
		}
	}
	for _, r := range rows {
		ch <- prometheus.MustNewConstMetric(b.pending, prometheus.GaugeValue, float64(r.Ready+r.Claimed), r.Topic)
		ch <- prometheus.MustNewConstMetric(b.oldest, prometheus.GaugeValue, r.OldestPending.Seconds(), r.Topic)
		ch <- prometheus.MustNewConstMetric(b.dead, prometheus.GaugeValue, float64(r.Dead), r.Topic)
		ch <- prometheus.MustNewConstMetric(b.parked, prometheus.GaugeValue, float64(r.ParkedKeys), r.Topic)
	}
	if !at.IsZero() {
		ch <- prometheus.MustNewConstMetric(b.lastRead, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
	}
	if b.cfg.Destinations != nil {
		for _, d := range b.cfg.Destinations() {
			for _, state := range []string{"closed", "open", "half-open"} {
				v := 0.0
				if d.Breaker == state {
					v = 1
				}
				ch <- prometheus.MustNewConstMetric(b.breaker, prometheus.GaugeValue, v, d.Name, state)
			}
		}
	}
}

// read returns the backlog and the pauses, read again when the last read
// is older than the interval. A failed read keeps the last figures (their
// timestamp shows their age) and is logged.
func (b *backlogCollector) read() ([]heraldadmin.TopicBacklog, []herald.Pause, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.at.IsZero() && time.Since(b.at) < b.cfg.BacklogInterval {
		return b.last, b.pauses, b.at
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.BacklogTimeout)
	defer cancel()
	rows, err := b.cfg.Admin.Backlog(ctx)
	var pauses []herald.Pause
	if err == nil {
		pauses, err = b.cfg.Admin.Pauses(ctx)
	}
	if err != nil {
		b.cfg.Logger.Warn("reading the backlog for metrics failed", "error", herald.Scrub(err.Error()))
		return b.last, b.pauses, b.at
	}
	b.last, b.pauses, b.at = rows, pauses, time.Now()
	return b.last, b.pauses, b.at
}
