package heraldpg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// MaintainPartitions runs the maintenance of a partitioned outbox once:
// it creates the partitions ahead, drops the partitions past retention
// whose rows are all published or dead (moving the dead ones to the
// dead-letter table first), and deletes, row by row and at most limit of
// them, the published rows past retention that no drop takes: those of the
// default partition and of partitions kept for a row still pending. A
// negative retention keeps every row (partitions are still created). The
// relay runs it through DeletePublished every RelayConfig.CleanupInterval;
// call it yourself only where no relay runs retention. On a plain table it
// returns ErrNotPartitioned.
func (d *Driver) MaintainPartitions(ctx context.Context, retention time.Duration, limit int) (MaintenanceReport, error) {
	return d.maintain(ctx, time.Time{}, retention, limit)
}

// maintain is MaintainPartitions at the time at, or at the database's
// now when at is zero (tests move at over simulated days).
func (d *Driver) maintain(ctx context.Context, at time.Time, retention time.Duration, limit int) (MaintenanceReport, error) {
	var rep MaintenanceReport
	if limit < 0 {
		return rep, errors.New("heraldpg: the cleanup limit must not be negative")
	}
	l, err := d.readLayout(ctx, d.db)
	if err != nil {
		return rep, err
	}
	if !l.partitioned {
		return rep, ErrNotPartitioned
	}
	now := at
	if now.IsZero() {
		if err := queryRow(ctx, d.db, `SELECT now()`, nil, &now); err != nil {
			return rep, fmt.Errorf("heraldpg: reading the clock: %w", err)
		}
	}
	parts, err := d.partitions(ctx, d.db)
	if err != nil {
		return rep, err
	}
	if rep.Created, err = d.createAhead(ctx, l, parts, now); err != nil {
		return rep, fmt.Errorf("heraldpg: %w", err)
	}
	if rep.Created > 0 {
		if parts, err = d.partitions(ctx, d.db); err != nil {
			return rep, err
		}
	}
	if retention < 0 {
		return rep, nil
	}
	defer func() { d.lastReport.Store(&rep) }()
	cutoff := now.Add(-retention)
	clean := []string{d.names.part().defaultName}
	for _, p := range parts {
		if p.to == nil || p.to.After(cutoff) {
			continue
		}
		dropped, err := d.dropPartition(ctx, p.name, cutoff, &rep)
		if err != nil {
			return rep, fmt.Errorf("heraldpg: %w", err)
		}
		if !dropped {
			clean = append(clean, p.name)
		}
	}
	for _, name := range clean {
		if rep.Deleted >= limit {
			break
		}
		n, err := d.db.exec(ctx, strSQL(deletePartitionRowsSQL, d.names.qualify(name)), cutoff, limit-rep.Deleted)
		if err != nil {
			return rep, fmt.Errorf("heraldpg: deleting published rows of %s: %w", name, err)
		}
		rep.Deleted += int(n)
	}
	return rep, nil
}

const (
	// The rows of one partition past retention that no drop takes, in
	// batches as the plain table's cleaner deletes them.
	deletePartitionRowsSQL = `WITH old AS (
		SELECT id FROM {{.Table}}
		WHERE state = 'published' AND published_at < $1
		ORDER BY published_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	DELETE FROM {{.Table}} o USING old WHERE o.id = old.id`

	// What decides a partition's drop, each read through a partial index:
	// whether it holds a ready, claimed or parked row, and when its last
	// row was published.
	partitionPendingSQL = `SELECT EXISTS (SELECT 1 FROM {{.Table}} WHERE state = 'ready')
	    OR EXISTS (SELECT 1 FROM {{.Table}} WHERE state = 'claimed' OR parked),
	    (SELECT max(published_at) FROM {{.Table}} WHERE state = 'published')`
)

// dropPartition drops the partition name when every row in it is
// published (retention ago) or dead; the dead rows move to the dead-letter
// table first. It reports false when the partition stays: a row is still
// ready, claimed or parked (listed in rep.Kept), or was published within
// retention.
//
// Three transactions. The first reads the partition's state; the second
// moves its dead rows and counts the published ones, with row locks only;
// the third takes the ACCESS EXCLUSIVE lock that a drop needs on the
// outbox table (DETACH CONCURRENTLY cannot be used beside a default
// partition), checks again that nothing but published rows is left (an
// operator may have requeued a dead row in between), and drops. That lock
// is held for a few index probes, and waited for at most a second.
func (d *Driver) dropPartition(ctx context.Context, name string, cutoff time.Time, rep *MaintenanceReport) (bool, error) {
	q := d.names.qualify(name)
	var (
		pending bool
		lastPub pgtype.Timestamptz
	)
	if err := queryRow(ctx, d.db, strSQL(partitionPendingSQL, q), nil, &pending, &lastPub); err != nil {
		return false, fmt.Errorf("reading partition %s: %w", name, err)
	}
	if pending {
		rep.Kept = append(rep.Kept, name)
		return false, nil
	}
	if lastPub.Valid && lastPub.InfinityModifier != pgtype.NegativeInfinity &&
		(lastPub.InfinityModifier == pgtype.Infinity || !lastPub.Time.Before(cutoff)) {
		return false, nil
	}
	var published int64
	err := d.db.inTx(ctx, func(tx conn) error {
		cols, err := d.deadColumns(ctx, tx)
		if err != nil {
			return err
		}
		n, err := tx.exec(ctx, `WITH m AS (DELETE FROM `+q+` WHERE state = 'dead' AND NOT parked RETURNING `+cols+`)
			INSERT INTO `+d.names.part().dead+` (`+cols+`) SELECT `+cols+` FROM m`)
		if err != nil {
			return fmt.Errorf("moving the dead rows of %s: %w", name, err)
		}
		rep.MovedDead += n
		return queryRow(ctx, tx, `SELECT count(*) FROM `+q, nil, &published)
	})
	if err != nil {
		return false, err
	}
	dropped := false
	err = d.db.inTx(ctx, func(tx conn) error {
		if _, err := tx.exec(ctx, maintenanceLockTimeout); err != nil {
			return err
		}
		if err := d.maintenanceLock(ctx, tx); err != nil {
			return err
		}
		var exists bool
		if err := queryRow(ctx, tx, `SELECT to_regclass($1) IS NOT NULL`, []any{q}, &exists); err != nil || !exists {
			return err
		}
		if _, err := tx.exec(ctx, `LOCK TABLE `+d.names.Qualified+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("locking the outbox to drop %s: %w", name, err)
		}
		var left bool
		if err := queryRow(ctx, tx, `SELECT EXISTS (SELECT 1 FROM `+q+` WHERE state = 'ready')
			OR EXISTS (SELECT 1 FROM `+q+` WHERE state = 'claimed' OR parked)
			OR EXISTS (SELECT 1 FROM `+q+` WHERE state = 'dead')
			OR EXISTS (SELECT 1 FROM `+q+` WHERE state = 'published' AND published_at >= $1)`,
			[]any{cutoff}, &left); err != nil || left {
			return err
		}
		for _, s := range []string{
			`ALTER TABLE ` + d.names.Qualified + ` DETACH PARTITION ` + q,
			`DROP TABLE ` + q,
		} {
			if _, err := tx.exec(ctx, s); err != nil {
				return fmt.Errorf("dropping partition %s: %w", name, err)
			}
		}
		dropped = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if dropped {
		rep.Dropped++
		rep.DroppedRows += published
	}
	return dropped, nil
}

// deadColumns lists, quoted, the columns of the dead-letter table that the
// outbox table has too: what moves between them. Migrate gives the
// dead-letter table every column the outbox gains.
func (d *Driver) deadColumns(ctx context.Context, c conn) (string, error) {
	var cols pgtype.Text
	err := queryRow(ctx, c, `SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
		FROM pg_attribute a
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
		  AND EXISTS (SELECT 1 FROM pg_attribute b
		              WHERE b.attrelid = $2::regclass AND b.attname = a.attname AND NOT b.attisdropped)`,
		[]any{d.names.part().dead, d.names.Qualified}, &cols)
	if err != nil {
		return "", fmt.Errorf("reading the dead-letter table's columns: %w", err)
	}
	if !cols.Valid || !strings.Contains(cols.String, "id") {
		return "", errors.New("the dead-letter table has no columns in common with the outbox")
	}
	return cols.String, nil
}
