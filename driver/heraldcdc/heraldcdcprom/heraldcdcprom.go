// Package heraldcdcprom exports a change-data-capture slot's state to
// Prometheus: the WAL it retains, its lag in bytes and seconds, whether a
// stream reads it and its wal_status. Register the Collector on the
// relay's own registry (heraldprom's), never on Prometheus's global one.
package heraldcdcprom

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-outbox/herald/driver/heraldcdc"
)

// Config configures a Collector.
type Config struct {
	// Querier reads pg_replication_slots on the outbox's database (a
	// pool). Required.
	Querier heraldcdc.Querier
	// Slot is the slot's name. Defaults to herald_outbox.
	Slot string
	// Stream, when set, gives herald_cdc_slot_lag_seconds: the age of the
	// oldest transaction it handed out and has not confirmed. A
	// *heraldcdc.Stream or a *heraldcdc.Source. Without it that metric is
	// not exported.
	Stream Unconfirmed
	// Skipped, when set, gives herald_cdc_skipped_messages_total: the
	// messages of the outbox's event prefix the stream skipped as no
	// event, which leave no dead letter. A *heraldcdc.Stream or a
	// *heraldcdc.Source. Without it that metric is not exported.
	Skipped Skipper
	// Timeout bounds each scrape's query. Defaults to 5s.
	Timeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now defaults to time.Now.
	Now func() time.Time
}

// Unconfirmed is what reads a slot and knows the commit time of the oldest
// transaction it handed out and has not confirmed, false when it has
// none.
type Unconfirmed interface {
	OldestUnconfirmed() (time.Time, bool)
}

// Skipper counts the event messages a stream skipped.
type Skipper interface {
	SkippedMessages() int64
}

// Statuses are the wal_status values herald_cdc_slot_wal_status reports,
// one series each: PostgreSQL's four and missing, for a slot that does
// not exist.
var Statuses = []string{"reserved", "extended", "unreserved", "lost", "missing"}

// Collector is a prometheus.Collector that reads the slot at each scrape.
type Collector struct {
	cfg                                     Config
	retained, lag, lagSeconds, active, safe *prometheus.Desc
	status, skipped                         *prometheus.Desc
}

// New returns a Collector.
func New(cfg Config) (*Collector, error) {
	if cfg.Querier == nil {
		return nil, errors.New("heraldcdcprom: Config.Querier is required")
	}
	if cfg.Slot == "" {
		cfg.Slot = "herald_outbox"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	l := prometheus.Labels{"slot": cfg.Slot}
	return &Collector{
		cfg:        cfg,
		retained:   prometheus.NewDesc("herald_cdc_slot_retained_wal_bytes", "WAL the slot keeps on the server's disk (current position minus restart_lsn).", nil, l),
		lag:        prometheus.NewDesc("herald_cdc_slot_lag_bytes", "WAL written since the slot's confirmed position.", nil, l),
		lagSeconds: prometheus.NewDesc("herald_cdc_slot_lag_seconds", "Age of the oldest transaction read from the slot and not confirmed; 0 when all are.", nil, l),
		active:     prometheus.NewDesc("herald_cdc_slot_active", "1 while a stream reads the slot.", nil, l),
		safe:       prometheus.NewDesc("herald_cdc_slot_safe_wal_bytes", "WAL that may still be written before the slot is in danger of being lost (max_slot_wal_keep_size); absent when unlimited.", nil, l),
		status:     prometheus.NewDesc("herald_cdc_slot_wal_status", "1 for the slot's wal_status, 0 for the others.", []string{"status"}, l),
		skipped: prometheus.NewDesc("herald_cdc_skipped_messages_total",
			"Logical decoding messages of the outbox's event prefix skipped as no event (not transactional, or no id or topic); each is logged and leaves no dead letter.", nil, l),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.retained, c.lag, c.lagSeconds, c.active, c.safe, c.status, c.skipped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A failed query is logged and
// exports nothing of the slot, so that the rest of the registry still
// scrapes.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.cfg.Stream != nil {
		lag := 0.0
		if t, ok := c.cfg.Stream.OldestUnconfirmed(); ok {
			lag = max(0, c.cfg.Now().Sub(t).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(c.lagSeconds, prometheus.GaugeValue, lag)
	}
	if c.cfg.Skipped != nil {
		ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(c.cfg.Skipped.SkippedMessages()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	info, err := heraldcdc.SlotStatus(ctx, c.cfg.Querier, c.cfg.Slot)
	status := info.WALStatus
	switch {
	case errors.Is(err, heraldcdc.ErrNoSlot):
		status = "missing"
	case err != nil:
		c.cfg.Logger.Warn("reading the replication slot for metrics", "slot", c.cfg.Slot, "error", err)
		return
	default:
		ch <- prometheus.MustNewConstMetric(c.retained, prometheus.GaugeValue, float64(info.RetainedBytes))
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, float64(info.LagBytes))
		if info.SafeWALBytes >= 0 {
			ch <- prometheus.MustNewConstMetric(c.safe, prometheus.GaugeValue, float64(info.SafeWALBytes))
		}
	}
	ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, b2f(info.Active))
	for _, s := range Statuses {
		ch <- prometheus.MustNewConstMetric(c.status, prometheus.GaugeValue, b2f(s == status), s)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var _ prometheus.Collector = (*Collector)(nil)
