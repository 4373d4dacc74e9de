package heraldpg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// TableStats is the size of the outbox table on disk, for operators and
// metrics (heraldpgprom): one entry per table that holds rows, that is the
// plain table, or each partition and the dead-letter table of a
// partitioned one.
type TableStats struct {
	Partitioned bool
	Relations   []RelationStats
	// Partitions counts the partitions of a partitioned table, the
	// default one included.
	Partitions int
	// Kept names the partitions the last maintenance run of this driver
	// kept past retention because they hold ready, claimed or parked
	// rows; nil before the first run.
	Kept []string
}

// RelationStats is one table of the outbox.
type RelationStats struct {
	Name string
	// Kind is "table" (a plain outbox), "partition", "default" (the
	// default partition) or "dead" (the dead-letter table).
	Kind string
	// From and To bound a partition's created_at; nil for MINVALUE and
	// for the default partition.
	From, To *time.Time
	// Bytes is the size on disk with indexes and TOAST.
	Bytes int64
	// LiveTuples and DeadTuples are the statistics collector's estimates:
	// dead tuples are row versions vacuum has yet to reclaim.
	LiveTuples, DeadTuples int64
}

const relationStatsSQL = `SELECT pg_total_relation_size(c.oid), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid = $1::regclass`

// TableStats reads the outbox's size from the catalog and the statistics
// collector: a few catalog reads per partition, never a scan of rows.
func (d *Driver) TableStats(ctx context.Context) (TableStats, error) {
	var st TableStats
	l, err := d.layout(ctx, d.db)
	if err != nil {
		return st, err
	}
	st.Partitioned = l.partitioned
	type rel struct {
		name, kind string
		from, to   *time.Time
	}
	var rels []rel
	if !l.partitioned {
		rels = []rel{{name: d.names.Table, kind: "table"}}
	} else {
		parts, err := d.partitions(ctx, d.db)
		if err != nil {
			return st, err
		}
		st.Partitions = len(parts)
		for _, p := range parts {
			kind := "partition"
			if p.name == d.names.part().defaultName {
				kind = "default"
			}
			rels = append(rels, rel{name: p.name, kind: kind, from: p.from, to: p.to})
		}
		rels = append(rels, rel{name: d.names.part().deadName, kind: "dead"})
		if rep := d.lastReport.Load(); rep != nil {
			st.Kept = slices.Clone(rep.Kept)
		}
	}
	for _, r := range rels {
		rs := RelationStats{Name: r.name, Kind: r.kind, From: r.from, To: r.to}
		var size pgtype.Int8
		// A partition dropped since it was listed is left out.
		err := queryRow(ctx, d.db, relationStatsSQL, []any{d.names.qualify(r.name)}, &size, &rs.LiveTuples, &rs.DeadTuples)
		if errors.Is(err, errNoRows) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("heraldpg: reading the size of %s: %w", r.name, err)
		}
		rs.Bytes = size.Int64
		st.Relations = append(st.Relations, rs)
	}
	return st, nil
}
