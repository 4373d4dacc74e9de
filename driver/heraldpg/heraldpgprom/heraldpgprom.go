// Package heraldpgprom exports the size of a PostgreSQL outbox table as
// Prometheus metrics: bytes and dead tuples of each table that holds its
// rows (the plain table, or each partition and the dead-letter table of a
// partitioned one), the number of partitions, and the partitions kept past
// retention because a row in them is still pending. It is apart from
// heraldpg so that the driver does not import Prometheus; register its
// collector on heraldprom's registry (Metrics.Registry), as the herald
// daemon does.
package heraldpgprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/herald-outbox/herald/driver/heraldpg"
)

// Collector reads heraldpg.Driver.TableStats (a few catalog reads per
// partition, never a scan of rows) at most once per ReadInterval, however
// often Prometheus scrapes: a database that does not answer delays one
// scrape in ReadInterval by the timeout, not every one.
type Collector struct {
	d       *heraldpg.Driver
	timeout time.Duration

	bytes, deadTuples, partitions, kept, up *prometheus.Desc

	mu   sync.Mutex
	at   time.Time // of the last read
	last heraldpg.TableStats
	err  error
}

// ReadInterval is the least time between two reads of the table's size.
const ReadInterval = 10 * time.Second

// New returns a collector of d's table. Each read is bounded by timeout
// (5s when zero).
func New(d *heraldpg.Driver, timeout time.Duration) *Collector {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	labels := []string{"relation", "kind"}
	return &Collector{
		d: d, timeout: timeout,
		bytes: prometheus.NewDesc("herald_outbox_relation_bytes",
			"Size on disk of a table holding outbox rows, with its indexes and TOAST: the plain table, or a partition, the default partition or the dead-letter table (kind).",
			labels, nil),
		deadTuples: prometheus.NewDesc("herald_outbox_relation_dead_tuples",
			"Row versions of a table holding outbox rows that vacuum has yet to reclaim (the statistics collector's estimate).",
			labels, nil),
		partitions: prometheus.NewDesc("herald_outbox_partitions",
			"Partitions of a partitioned outbox table, the default one included (0 for a plain table).", nil, nil),
		kept: prometheus.NewDesc("herald_outbox_partitions_kept",
			"Partitions past retention that this process's last maintenance kept because they hold ready, claimed or parked rows.",
			nil, nil),
		up: prometheus.NewDesc("herald_outbox_table_stats_up",
			"1 when the last scrape read the outbox table's size, 0 when it failed.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.deadTuples, c.partitions, c.kept, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.read()
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	for _, r := range st.Relations {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(r.Bytes), r.Name, r.Kind)
		ch <- prometheus.MustNewConstMetric(c.deadTuples, prometheus.GaugeValue, float64(r.DeadTuples), r.Name, r.Kind)
	}
	ch <- prometheus.MustNewConstMetric(c.partitions, prometheus.GaugeValue, float64(st.Partitions))
	ch <- prometheus.MustNewConstMetric(c.kept, prometheus.GaugeValue, float64(len(st.Kept)))
}

func (c *Collector) read() (heraldpg.TableStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < ReadInterval {
		return c.last, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.last, c.err = c.d.TableStats(ctx)
	c.at = time.Now()
	return c.last, c.err
}
