package heraldpg

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/internal/testenv"
)

// BenchmarkPartitionedOutbox measures, in one run and in interleaved
// rounds, what partitioning changes: retention of published rows (the
// drop of a partition against the plain table's DELETE cleaner, per
// million rows) and a relay's drain rate (ready events published per
// second, partitioned against plain). It reports medians as ratios, with
// the range over rounds:
//
//	go test -run XXX -bench PartitionedOutbox -benchtime 1x ./driver/heraldpg
//
// HERALD_BENCH_ROUNDS (default 3), HERALD_BENCH_RETENTION_ROWS (rows
// retention removes per round, default a million) and
// HERALD_BENCH_DRAIN_ROWS (default 20,000) size it.
func BenchmarkPartitionedOutbox(b *testing.B) {
	rounds := benchEnv("HERALD_BENCH_ROUNDS", 3)
	retRows := benchEnv("HERALD_BENCH_RETENTION_ROWS", 1_000_000)
	drainRows := benchEnv("HERALD_BENCH_DRAIN_ROWS", 20_000)
	pool := testenv.PostgresPool(b)
	for range b.N {
		var dropPerM, deletePerM, dropRatio, plainRate, partRate, drainRatio []float64
		for round := range rounds {
			// The order alternates, so that neither side always runs on a
			// warmer server.
			var del, drop, plain, part float64
			if round%2 == 0 {
				del, drop = benchDeleteCleaner(b, pool, retRows), benchPartitionDrop(b, pool, retRows)
				plain, part = benchDrain(b, pool, nil, drainRows), benchDrain(b, pool, &Partitioning{}, drainRows)
			} else {
				drop, del = benchPartitionDrop(b, pool, retRows), benchDeleteCleaner(b, pool, retRows)
				part, plain = benchDrain(b, pool, &Partitioning{}, drainRows), benchDrain(b, pool, nil, drainRows)
			}
			perM := 1e6 / float64(retRows)
			deletePerM, dropPerM = append(deletePerM, del*perM), append(dropPerM, drop*perM)
			dropRatio = append(dropRatio, del/drop)
			plainRate, partRate = append(plainRate, plain), append(partRate, part)
			drainRatio = append(drainRatio, part/plain)
		}
		b.ReportMetric(median(deletePerM), "delete-s/Mrows")
		b.ReportMetric(median(dropPerM), "drop-s/Mrows")
		b.ReportMetric(median(dropRatio), "delete/drop")
		b.ReportMetric(median(plainRate), "plain-events/s")
		b.ReportMetric(median(partRate), "partitioned-events/s")
		b.ReportMetric(median(drainRatio), "partitioned/plain")
		b.Logf("retention per million rows: DELETE cleaner %.2fs (%s), partition drop %.3fs (%s); DELETE/drop median %.0fx (%s)",
			median(deletePerM), spread(deletePerM), median(dropPerM), spread(dropPerM), median(dropRatio), spread(dropRatio))
		b.Logf("drain of %d events: plain %.0f/s (%s), partitioned %.0f/s (%s); partitioned/plain median %.2f (%s)",
			drainRows, median(plainRate), spread(plainRate), median(partRate), spread(partRate), median(drainRatio), spread(drainRatio))
	}
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func spread(xs []float64) string {
	return fmt.Sprintf("%.3g to %.3g over %d rounds", slices.Min(xs), slices.Max(xs), len(xs))
}

func benchTable(b *testing.B, pool *pgxpool.Pool, p *Partitioning) *Driver {
	b.Helper()
	d, err := New(pool, &Config{Schema: testenv.Schema(b), Partition: p})
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return d
}

// benchFill writes n published rows created at from (spread over an hour),
// published a minute later, and vacuums them as a table that has lived a
// while would be.
func benchFill(b *testing.B, pool *pgxpool.Pool, d *Driver, from time.Time, n int) {
	b.Helper()
	ctx := b.Context()
	for _, s := range []string{
		`INSERT INTO ` + d.Table() + ` (topic, key, payload, state, created_at, available_at, published_at)
		SELECT 'orders', 'k' || (g % 100), convert_to(repeat('x', 200), 'UTF8'), 'published', c, c, c + interval '1 minute'
		FROM generate_series(0, $2::integer - 1) g,
		     LATERAL (SELECT $1::timestamptz + g * (3600000000 / $2::integer) * interval '1 microsecond' AS c) x`,
		`VACUUM ANALYZE ` + d.Table(),
	} {
		var err error
		if s[0] == 'V' {
			_, err = pool.Exec(ctx, s)
		} else {
			_, err = pool.Exec(ctx, s, from, n)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchDeleteCleaner is the seconds the plain table's cleaner takes to
// delete n published rows past retention, as the relay runs it: 1,000 rows
// a statement (RelayConfig.CleanupBatchSize's default).
func benchDeleteCleaner(b *testing.B, pool *pgxpool.Pool, n int) float64 {
	d := benchTable(b, pool, nil)
	benchFill(b, pool, d, time.Now().Add(-3*day), n)
	start := time.Now()
	total := 0
	for {
		k, err := d.DeletePublished(b.Context(), day, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if total += k; k < 1000 {
			break
		}
	}
	if total != n {
		b.Fatalf("the cleaner deleted %d rows of %d", total, n)
	}
	return time.Since(start).Seconds()
}

// benchPartitionDrop is the seconds maintenance takes to drop the
// partition holding n published rows past retention (the dead-letter move,
// the count and the drop), at a time two days after them. Only that
// partition's drop is timed: the empty partitions a run drops beside it
// cost as much each (a drop costs about the same whatever its rows).
func benchPartitionDrop(b *testing.B, pool *pgxpool.Pool, n int) float64 {
	d := benchTable(b, pool, &Partitioning{})
	var now time.Time
	if err := pool.QueryRow(b.Context(), `SELECT now()`).Scan(&now); err != nil {
		b.Fatal(err)
	}
	from := binStart(now, day).Add(day) // the first partition ahead
	benchFill(b, pool, d, from, n)
	at := from.Add(3 * day)
	if _, err := d.maintain(b.Context(), at, -1, 0); err != nil { // partitions ahead, not timed
		b.Fatal(err)
	}
	var rep MaintenanceReport
	start := time.Now()
	dropped, err := d.dropPartition(b.Context(), d.names.partitionName(from), at.Add(-day), &rep)
	if err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start).Seconds()
	if !dropped || rep.DroppedRows != int64(n) {
		b.Fatalf("the drop took %d rows of %d: %+v", rep.DroppedRows, n, rep)
	}
	return elapsed
}

// benchDrain is the events per second a relay publishes (to a publisher
// that confirms at once) out of n ready events.
func benchDrain(b *testing.B, pool *pgxpool.Pool, p *Partitioning, n int) float64 {
	d := benchTable(b, pool, p)
	if _, err := pool.Exec(b.Context(), `INSERT INTO `+d.Table()+` (topic, key, payload)
		SELECT 'orders', 'k' || (g % 500), convert_to(repeat('x', 200), 'UTF8') FROM generate_series(1, $1::integer) g`, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(b.Context(), `VACUUM ANALYZE `+d.Table()); err != nil {
		b.Fatal(err)
	}
	var seen atomic.Int64
	done := make(chan struct{})
	pub := herald.PublisherFunc(func(_ context.Context, batch []herald.Envelope) error {
		if seen.Add(int64(len(batch))) == int64(n) {
			close(done)
		}
		return nil
	})
	r, err := herald.NewRelay(&herald.RelayConfig{Store: d, Publisher: pub, BatchSize: 1000,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := r.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatal("the relay did not drain in 5 minutes")
	}
	if err := r.Stop(context.Background()); err != nil {
		b.Fatal(err)
	}
	return float64(n) / time.Since(start).Seconds()
}
