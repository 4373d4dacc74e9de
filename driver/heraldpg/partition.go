package heraldpg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Partitioning makes Migrate create the outbox table partitioned by
// created_at (see the package doc, "Partitioned outbox"). It is read when
// the table is created, by Migrate, or converted, by PartitionExisting; the
// interval and the number of partitions kept ahead are then stored beside
// the table, and every driver on it follows them.
type Partitioning struct {
	// Interval is the time range of one partition. At least a minute, at
	// most 31 days. Defaults to 24h.
	Interval time.Duration
	// Ahead is how many partitions past the current one maintenance keeps
	// created, so that rows never wait for a partition to exist. At least
	// 1, at most 100. Defaults to 3.
	Ahead int
}

func (p *Partitioning) withDefaults() (Partitioning, error) {
	out := Partitioning{Interval: 24 * time.Hour, Ahead: 3}
	if p == nil {
		return out, nil
	}
	if p.Interval != 0 {
		out.Interval = p.Interval
	}
	if p.Ahead != 0 {
		out.Ahead = p.Ahead
	}
	switch {
	case out.Interval < time.Minute || out.Interval > 31*24*time.Hour:
		return out, fmt.Errorf("heraldpg: Partitioning.Interval %s must be between 1m and 744h (31 days)", out.Interval)
	case out.Interval%time.Minute != 0:
		return out, fmt.Errorf("heraldpg: Partitioning.Interval %s must be a whole number of minutes", out.Interval)
	case out.Ahead < 1 || out.Ahead > 100:
		return out, fmt.Errorf("heraldpg: Partitioning.Ahead %d must be between 1 and 100", out.Ahead)
	}
	return out, nil
}

// partNames are the tables beside a partitioned outbox, quoted.
type partNames struct {
	settings, dead, deflt, legacy     string // qualified
	deadName, defaultName, legacyName string // unqualified, unquoted
}

func (n names) part() partNames {
	q := func(s string) string { return `"` + n.Schema + `"."` + s + `"` }
	return partNames{
		settings: q(n.Table + "_partitioning"), dead: q(n.Table + "_dead"),
		deflt: q(n.Table + "_default"), legacy: q(n.Table + "_legacy"),
		deadName: n.Table + "_dead", defaultName: n.Table + "_default", legacyName: n.Table + "_legacy",
	}
}

func (n names) qualify(table string) string { return `"` + n.Schema + `"."` + table + `"` }

// partitionName names the partition whose range starts at from: the
// table's name, _p, and the start in UTC to the minute (the interval's
// unit), so that names sort as the ranges do.
func (n names) partitionName(from time.Time) string {
	return n.Table + "_p" + from.UTC().Format("20060102t1504")
}

// layout is what the driver knows of its table's shape: plain, or
// partitioned with the stored settings. A table becomes partitioned once
// and stays so; a plain one is looked at again on every call that needs
// to know, so that a relay started before PartitionExisting follows it.
type layout struct {
	partitioned bool
	settings    Partitioning
}

// layoutCache holds a partitioned layout once seen.
type layoutCache struct {
	p       atomic.Pointer[layout]
	plainAt atomic.Pointer[time.Time] // when a claim last found the table plain
}

func (d *Driver) layout(ctx context.Context, c conn) (layout, error) {
	if l := d.layouts.p.Load(); l != nil {
		return *l, nil
	}
	return d.readLayout(ctx, c)
}

// readLayout reads the layout from the database, settings included:
// maintenance reads them on every run, so that a change by Migrate
// applies to the partitions created from then on.
func (d *Driver) readLayout(ctx context.Context, c conn) (layout, error) {
	var reg pgtype.Text
	if err := queryRow(ctx, c, `SELECT to_regclass($1)::text`, []any{d.names.part().settings}, &reg); err != nil {
		return layout{}, fmt.Errorf("heraldpg: reading the table's layout: %w", err)
	}
	if !reg.Valid {
		return layout{}, nil
	}
	var (
		us    int64
		ahead int
	)
	if err := queryRow(ctx, c, `SELECT interval_us, ahead FROM `+d.names.part().settings, nil, &us, &ahead); err != nil {
		return layout{}, fmt.Errorf("heraldpg: reading the partitioning settings: %w", err)
	}
	l := &layout{partitioned: true, settings: Partitioning{Interval: time.Duration(us) * time.Microsecond, Ahead: ahead}}
	d.layouts.p.Store(l)
	return *l, nil
}

// partition is one partition of the outbox as the catalog holds it. From
// is nil for a MINVALUE lower bound; both are nil for the default.
type partition struct {
	name     string
	from, to *time.Time
}

// Bounds are read back from the catalog's text through a cast in the same
// session, so that DateStyle and TimeZone never matter.
const partitionsSQL = `SELECT c.relname,
	(regexp_match(b, 'FROM \(''([^'']*)''\)'))[1]::timestamptz,
	(regexp_match(b, 'TO \(''([^'']*)''\)'))[1]::timestamptz
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL pg_get_expr(c.relpartbound, c.oid) b
WHERE i.inhparent = $1::regclass
ORDER BY 3 NULLS LAST, 1`

func (d *Driver) partitions(ctx context.Context, c conn) ([]partition, error) {
	var out []partition
	err := c.query(ctx, partitionsSQL, []any{d.names.Qualified}, func(scan func(...any) error) error {
		var (
			p        partition
			from, to pgtype.Timestamptz
		)
		if err := scan(&p.name, &from, &to); err != nil {
			return err
		}
		if from.Valid && from.InfinityModifier == pgtype.Finite {
			p.from = &from.Time
		}
		if to.Valid && to.InfinityModifier == pgtype.Finite {
			p.to = &to.Time
		}
		out = append(out, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: listing partitions: %w", err)
	}
	return out, nil
}

// binStart is the start of the interval holding t, on a grid from
// 2000-01-01 UTC.
func binStart(t time.Time, interval time.Duration) time.Time {
	origin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	d := t.Sub(origin)
	start := d - d%interval // toward zero
	if d < 0 && d%interval != 0 {
		start -= interval
	}
	return origin.Add(start)
}

// hotStorage is the storage of every new partition. Each is the hot one
// in turn, written and updated by claims and acknowledgements: vacuumed
// after a thousand dead tuples rather than a fifth of the table, so that
// the ready and blocked indexes stay small. A partition past its time
// takes no writes, and the settings cost it nothing.
const hotStorage = `autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
	autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 10000,
	autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0`

// maintenanceLockTimeout bounds how long maintenance waits for a lock it
// needs: it gives up and tries again at its next run rather than make
// producers queue behind it.
const maintenanceLockTimeout = `SET LOCAL lock_timeout = '1s'`

// createPartition creates the partition of [from, to) in one transaction:
// a table shaped like the outbox, the default partition's rows of that
// range moved into it, then attached. Attaching takes a SHARE UPDATE
// EXCLUSIVE lock on the outbox, which producers' inserts and relays'
// claims do not wait for, and an ACCESS EXCLUSIVE lock on the default
// partition, which is empty or small: the lock is held for a moment.
func (d *Driver) createPartition(ctx context.Context, from, to time.Time) error {
	return d.db.inTx(ctx, func(tx conn) error {
		if _, err := tx.exec(ctx, maintenanceLockTimeout); err != nil {
			return err
		}
		// Two relays' maintenance may run at once: one creates, the other
		// then finds the partition there.
		if err := d.maintenanceLock(ctx, tx); err != nil {
			return err
		}
		var exists bool
		if err := queryRow(ctx, tx, `SELECT to_regclass($1) IS NOT NULL`,
			[]any{d.names.qualify(d.names.partitionName(from))}, &exists); err != nil || exists {
			return err
		}
		return d.createPartitionTx(ctx, tx, from, to)
	})
}

// errClaimedInDefault stops the creation of partitions for this run: the
// default partition holds a claimed row of the new partition's range.
// Moving it would be safe for the row but not for its acknowledgement: a
// statement planned before the attach does not see the new partition, and
// would find the row gone (a duplicate publication after its lease). The
// claim ends within its lease; the next run creates the partition.
var errClaimedInDefault = errors.New("the default partition holds a claimed row of the range")

// maintenanceLock keeps the maintenance of one table to one transaction
// at a time, across processes.
func (d *Driver) maintenanceLock(ctx context.Context, tx conn) error {
	_, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "herald:maintain:"+d.names.Qualified)
	if err != nil {
		return fmt.Errorf("taking the maintenance lock: %w", err)
	}
	return nil
}

func (d *Driver) createPartitionTx(ctx context.Context, tx conn, from, to time.Time) error {
	pn := d.names.part()
	name := d.names.partitionName(from)
	q := d.names.qualify(name)
	if _, err := tx.exec(ctx, `CREATE TABLE `+q+` (LIKE `+d.names.Qualified+
		` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE) WITH (`+hotStorage+`)`); err != nil {
		return fmt.Errorf("creating partition %s: %w", name, err)
	}
	var hasDefault bool
	if err := queryRow(ctx, tx, `SELECT to_regclass($1) IS NOT NULL`, []any{pn.deflt}, &hasDefault); err != nil {
		return err
	}
	if hasDefault {
		// Rows that arrived before their partition existed move into it.
		// The lock comes first: no claim or acknowledgement of those rows
		// runs while they move.
		if _, err := tx.exec(ctx, `LOCK TABLE `+pn.deflt+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("locking the default partition: %w", err)
		}
		var claimed bool
		if err := queryRow(ctx, tx, `SELECT EXISTS (SELECT 1 FROM `+pn.deflt+`
			WHERE state = 'claimed' AND created_at >= $1 AND created_at < $2)`, []any{from, to}, &claimed); err != nil {
			return err
		}
		if claimed {
			return errClaimedInDefault
		}
		if _, err := tx.exec(ctx, `WITH m AS (DELETE FROM `+pn.deflt+` WHERE created_at >= $1 AND created_at < $2 RETURNING *)
			INSERT INTO `+q+` SELECT * FROM m`, from, to); err != nil {
			return fmt.Errorf("moving rows from the default partition into %s: %w", name, err)
		}
	}
	if _, err := tx.exec(ctx, `ALTER TABLE `+d.names.Qualified+` ATTACH PARTITION `+q+
		` FOR VALUES FROM ('`+from.UTC().Format(time.RFC3339)+`') TO ('`+to.UTC().Format(time.RFC3339)+`')`); err != nil {
		return fmt.Errorf("attaching partition %s: %w", name, err)
	}
	return nil
}

// maxPartitionsPerRun bounds the partitions one maintenance run creates.
// After a long time without maintenance, the gap between the last
// partition and now is left to the default partition (whose rows the
// cleaner deletes row by row) rather than filled with a partition per
// interval missed.
const maxPartitionsPerRun = 64

// createAhead creates partitions from the end of the last one until Ahead
// intervals past the one holding now.
func (d *Driver) createAhead(ctx context.Context, l layout, parts []partition, now time.Time) (int, error) {
	iv := l.settings.Interval
	cur := binStart(now, iv)
	horizon := cur.Add(time.Duration(l.settings.Ahead+1) * iv)
	start := contiguousStart(parts, cur, iv)
	made := 0
	for from := start; from.Before(horizon) && made < maxPartitionsPerRun; from = from.Add(iv) {
		err := d.createPartition(ctx, from, from.Add(iv))
		if errors.Is(err, errClaimedInDefault) {
			break // partitions stay contiguous: this one first, next run
		}
		if err != nil {
			return made, err
		}
		made++
	}
	return made, nil
}

// contiguousStart is where the next partition starts: the end of the last
// one, unless that is more than maxPartitionsPerRun intervals before cur
// (or there is none), then cur.
func contiguousStart(parts []partition, cur time.Time, iv time.Duration) time.Time {
	var last *time.Time
	for _, p := range parts {
		if p.to != nil && (last == nil || p.to.After(*last)) {
			last = p.to
		}
	}
	if last == nil || last.Before(cur.Add(-maxPartitionsPerRun*iv)) {
		return cur
	}
	return *last
}

// ErrNotPartitioned is returned by the partition maintenance of a plain
// table.
var ErrNotPartitioned = errors.New("heraldpg: the outbox table is not partitioned")

// MaintenanceReport is what one run of partition maintenance did and
// found.
type MaintenanceReport struct {
	Created int // partitions created
	Dropped int // partitions dropped
	// DroppedRows are the published rows that went with the dropped
	// partitions; MovedDead the dead rows moved to the dead-letter table
	// before.
	DroppedRows, MovedDead int64
	// Deleted are published rows deleted one by one: those of the default
	// partition and of partitions kept past their time.
	Deleted int
	// Kept names the partitions past retention that still hold ready,
	// claimed or parked rows, and so were not dropped.
	Kept []string
}

// strSQL renders a partition's qualified name into a statement written
// for the outbox table.
func strSQL(stmt, qualified string) string { return strings.ReplaceAll(stmt, "{{.Table}}", qualified) }

// noSortSQL is set in a claim's transaction on a partitioned table. A
// claim takes the first ready rows in (available_at, seq) order: on a
// plain table that is one ordered probe of the ready index, and on a
// partitioned one a merge of each partition's ordered probe (Merge
// Append). The planner, when its statistics call the ready rows few (a
// partition never analyzed yet, a backlog that arrived since), may instead
// read every ready row of every partition and sort them, which under a
// large backlog reads it whole on every claim. Sorting is made the last
// resort; the small sorts a claim needs over the rows it took remain.
// Their cost, inflated by the setting, must not make the planner compile
// the statement (JIT took seconds per claim): JIT is off in the same
// transaction.
const noSortSQL = `SET LOCAL enable_sort = off; SET LOCAL jit = off;`

// claimsPartitioned tells a claim whether its table is partitioned,
// asking the database at most once a minute while the answer is no (a
// table converted while relays run is seen within a minute), never again
// once it is yes. A failed look is taken for no, for a minute too: the
// claim's own query reports the database's trouble, and claims during an
// outage cost no second statement. A claim on a partitioned table taken
// for plain is still correct; only its plan may sort.
func (d *Driver) claimsPartitioned(ctx context.Context) bool {
	if d.layouts.p.Load() != nil {
		return true
	}
	now := time.Now()
	if last := d.layouts.plainAt.Load(); last != nil && now.Sub(*last) < time.Minute {
		return false
	}
	d.layouts.plainAt.Store(&now)
	l, err := d.layout(ctx, d.db)
	return err == nil && l.partitioned
}
