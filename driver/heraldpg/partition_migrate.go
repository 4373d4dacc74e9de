package heraldpg

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// idCreatedIndex is the unique index on (id, created_at) that
// PartitionExisting builds concurrently before its short stop: it becomes
// the primary key of the plain table's rows, then a partition.
func (n names) idCreatedIndex() string { return n.Table + "_id_created" }

// isPartitioned reports whether the outbox table is partitioned, in tx.
func (d *Driver) isPartitioned(ctx context.Context, tx conn) (bool, error) {
	var p bool
	err := queryRow(ctx, tx, `SELECT to_regclass($1) IS NOT NULL`, []any{d.names.part().settings}, &p)
	return p, err
}

// afterMigrations runs in Migrate's transaction, after the migrations: it
// creates a new table partitioned when asked, and keeps the dead-letter
// table of a partitioned one in step with the columns the migrations
// added. current is the version the table had before them.
func (d *Driver) afterMigrations(ctx context.Context, tx conn, current int) error {
	partitioned, err := d.isPartitioned(ctx, tx)
	if err != nil {
		return err
	}
	if !partitioned && d.partitioning != nil {
		if current > 0 {
			return fmt.Errorf("%s exists and is not partitioned: convert it with PartitionExisting "+
				"(herald migrate --partition-existing)", d.names.Qualified)
		}
		return d.convert(ctx, tx, *d.partitioning, false)
	}
	if !partitioned {
		return nil
	}
	if p := d.partitioning; p != nil {
		// Asked again: the settings apply to the partitions created from
		// now on (they follow on from the last one).
		if _, err := tx.exec(ctx, `UPDATE `+d.names.part().settings+` SET interval_us = $1, ahead = $2`,
			p.Interval.Microseconds(), p.Ahead); err != nil {
			return fmt.Errorf("updating the partitioning settings: %w", err)
		}
	}
	return d.syncDeadColumns(ctx, tx)
}

// PartitionExisting converts a plain outbox table into a partitioned one
// (see "Partitioned outbox" in the package doc), keeping every row. First,
// while relays and producers run, it builds a unique index on (id,
// created_at) concurrently. Then, in one transaction under an ACCESS
// EXCLUSIVE lock on the table (the stop: producers and relays wait, for
// about the time a scan of the table takes), the plain table becomes the
// partition of every time before the end of the current interval, a
// partitioned table takes its name, indexes and constraints, and the
// partitions ahead are created. Nothing is copied. Rows claimed before
// keep their claim: relays acknowledge them as before. A table that is
// already partitioned is left as it is.
func (d *Driver) PartitionExisting(ctx context.Context, p *Partitioning) error {
	settings, err := p.withDefaults()
	if err != nil {
		return err
	}
	v, err := d.schemaVersion(ctx, d.db)
	if err != nil {
		return err
	}
	if v == 0 {
		return fmt.Errorf("heraldpg: %s does not exist: run Migrate (herald migrate) first", d.names.Qualified)
	}
	if partitioned, err := d.isPartitioned(ctx, d.db); err != nil || partitioned {
		return err
	}
	// An earlier attempt cut short may have left the index invalid.
	idx := d.names.qualify(d.names.idCreatedIndex())
	var valid pgtype.Bool
	if err := queryRow(ctx, d.db, `SELECT (SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1))`,
		[]any{idx}, &valid); err != nil {
		return fmt.Errorf("heraldpg: %w", err)
	}
	if valid.Valid && !valid.Bool {
		if _, err := d.db.exec(ctx, `DROP INDEX CONCURRENTLY `+idx); err != nil {
			return fmt.Errorf("heraldpg: dropping an invalid index left by an earlier attempt: %w", err)
		}
	}
	if _, err := d.db.exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "`+d.names.idCreatedIndex()+
		`" ON `+d.names.Qualified+` (id, created_at)`); err != nil {
		return fmt.Errorf("heraldpg: building the (id, created_at) index: %w", err)
	}
	err = d.db.inTx(ctx, func(tx conn) error {
		if _, err := tx.exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, "herald:"+d.names.Qualified); err != nil {
			return fmt.Errorf("taking the migration lock: %w", err)
		}
		if _, err := tx.exec(ctx, `SET LOCAL lock_timeout = '10s'`); err != nil {
			return err
		}
		return d.convert(ctx, tx, settings, true)
	})
	if err != nil {
		return fmt.Errorf("heraldpg: partitioning %s: %w", d.names.Qualified, err)
	}
	if _, err := d.maintain(ctx, time.Time{}, -1, 0); err != nil {
		return fmt.Errorf("heraldpg: creating partitions ahead: %w", err)
	}
	return nil
}

// tableIndex is one index of the plain table, as the partitioned table
// takes it again.
type tableIndex struct {
	name, method, columns, predicate string
	unique, primary                  bool
}

const tableIndexesSQL = `SELECT c.relname, am.amname,
	(SELECT string_agg(pg_get_indexdef(i.indexrelid, k, true), ', ' ORDER BY k)
	 FROM generate_series(1, i.indnkeyatts) k),
	coalesce(pg_get_expr(i.indpred, i.indrelid, true), ''), i.indisunique, i.indisprimary
FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am am ON am.oid = c.relam
WHERE i.indrelid = $1::regclass
ORDER BY c.relname`

// convert turns the plain outbox table into a partitioned one, in tx.
// With existing, the plain table's rows stay where they are: the table
// becomes the partition of every created_at before the end of the current
// interval (named <table>_legacy, dropped by retention like any other once
// its rows are done). Without, the plain table was created empty by this
// same migration and is dropped.
func (d *Driver) convert(ctx context.Context, tx conn, p Partitioning, existing bool) error {
	n, pn := d.names, d.names.part()
	t := n.Qualified
	if _, err := tx.exec(ctx, `LOCK TABLE `+t+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("locking %s: %w", t, err)
	}
	var indexes []tableIndex
	err := tx.query(ctx, tableIndexesSQL, []any{t}, func(scan func(...any) error) error {
		var ix tableIndex
		if err := scan(&ix.name, &ix.method, &ix.columns, &ix.predicate, &ix.unique, &ix.primary); err != nil {
			return err
		}
		indexes = append(indexes, ix)
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the indexes of %s: %w", t, err)
	}
	var now time.Time
	if err := queryRow(ctx, tx, `SELECT now()`, nil, &now); err != nil {
		return err
	}
	// The plain table's rows keep every time before cutoff; the first
	// partition starts there.
	cutoff := binStart(now, p.Interval)
	if existing {
		cutoff = cutoff.Add(p.Interval)
	}
	legacy := n.qualify(pn.legacyName)
	stmts := []string{`ALTER TABLE ` + t + ` RENAME TO "` + pn.legacyName + `"`}
	for i, ix := range indexes {
		if ix.name != n.idCreatedIndex() {
			stmts = append(stmts, `ALTER INDEX `+n.qualify(ix.name)+` RENAME TO "`+pn.legacyName+`_`+strconv.Itoa(i)+`"`)
		}
	}
	stmts = append(stmts,
		`CREATE TABLE `+t+` (LIKE `+legacy+` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY
			INCLUDING STORAGE INCLUDING COMMENTS) PARTITION BY RANGE (created_at)`,
		// The partition key must be in every unique index: the primary
		// key is (id, created_at).
		`ALTER TABLE `+t+` ADD CONSTRAINT "`+n.Table+`_pkey" PRIMARY KEY (id, created_at)`,
		// seq goes on from where the plain table's left off.
		`SELECT setval(pg_get_serial_sequence('`+t+`', 'seq'), greatest(
			(SELECT max(seq) FROM `+legacy+`),
			pg_sequence_last_value(pg_get_serial_sequence('`+legacy+`', 'seq')::regclass),
			1))`)
	for _, ix := range indexes {
		if ix.primary || ix.name == n.idCreatedIndex() {
			continue
		}
		if ix.unique {
			return fmt.Errorf("index %s is unique: a partitioned table cannot have it without created_at", ix.name)
		}
		s := `CREATE INDEX "` + ix.name + `" ON ` + t + ` USING ` + ix.method + ` (` + ix.columns + `)`
		if ix.predicate != "" {
			s += ` WHERE ` + ix.predicate
		}
		stmts = append(stmts, s)
	}
	if existing {
		stmts = append(stmts, d.attachLegacy(indexes, cutoff)...)
	} else {
		stmts = append(stmts, `DROP TABLE `+legacy)
	}
	stmts = append(stmts,
		`CREATE TABLE `+pn.deflt+` PARTITION OF `+t+` DEFAULT WITH (`+hotStorage+`)`,
		// Dead rows of dropped partitions, never lost: the admin lists,
		// requeues and discards them with the outbox's own.
		`CREATE TABLE `+pn.dead+` (LIKE `+t+` INCLUDING DEFAULTS INCLUDING STORAGE)`,
		`ALTER TABLE `+pn.dead+` ADD CONSTRAINT "`+pn.deadName+`_pkey" PRIMARY KEY (id, created_at)`,
		`CREATE INDEX "`+pn.deadName+`_topic_idx" ON `+pn.dead+` (topic, seq)`,
		`CREATE TABLE `+pn.settings+` (
			one         boolean PRIMARY KEY DEFAULT true CHECK (one),
			interval_us bigint  NOT NULL CHECK (interval_us > 0),
			ahead       integer NOT NULL CHECK (ahead > 0))`,
		`INSERT INTO `+pn.settings+` (interval_us, ahead) VALUES (`+
			strconv.FormatInt(p.Interval.Microseconds(), 10)+`, `+strconv.Itoa(p.Ahead)+`)`,
	)
	if existing {
		stmts = append(stmts, `INSERT INTO `+t+` SELECT * FROM herald_moving`)
	}
	for _, s := range stmts {
		if _, err := tx.exec(ctx, s); err != nil {
			return fmt.Errorf("%w (in %s)", err, firstLine(s))
		}
	}
	for i := 0; i <= p.Ahead; i++ {
		from := cutoff.Add(time.Duration(i) * p.Interval)
		if err := d.createPartitionTx(ctx, tx, from, from.Add(p.Interval)); err != nil {
			return err
		}
	}
	return nil
}

// attachLegacy makes the renamed plain table the partition of every time
// before cutoff: the rows at or past cutoff (infinity, or another
// program's future times) wait in a temporary table to be inserted again
// through the partitioned table; the (id, created_at) index becomes the
// primary key (built now if PartitionExisting's concurrent build is not
// there); then the table is attached, which checks its rows against the
// range in one scan under the lock already held, and matches its other
// indexes to the partitioned table's by definition.
func (d *Driver) attachLegacy(indexes []tableIndex, cutoff time.Time) []string {
	n, pn := d.names, d.names.part()
	legacy := n.qualify(pn.legacyName)
	at := `'` + cutoff.UTC().Format(time.RFC3339) + `'`
	stmts := []string{
		`CREATE TEMP TABLE herald_moving (LIKE ` + legacy + `) ON COMMIT DROP`,
		`WITH m AS (DELETE FROM ` + legacy + ` WHERE NOT (created_at < ` + at + `) RETURNING *)
		INSERT INTO herald_moving SELECT * FROM m`,
	}
	haveIndex := false
	for i, ix := range indexes {
		if ix.name == n.idCreatedIndex() {
			haveIndex = true
		}
		if ix.primary {
			stmts = append(stmts, `ALTER TABLE `+legacy+` DROP CONSTRAINT "`+pn.legacyName+`_`+strconv.Itoa(i)+`"`)
		}
	}
	if !haveIndex {
		stmts = append(stmts, `CREATE UNIQUE INDEX "`+n.idCreatedIndex()+`" ON `+legacy+` (id, created_at)`)
	}
	return append(stmts,
		`ALTER TABLE `+legacy+` ADD CONSTRAINT "`+pn.legacyName+`_pkey" PRIMARY KEY USING INDEX "`+n.idCreatedIndex()+`"`,
		`ALTER TABLE `+legacy+` SET (`+hotStorage+`)`,
		`ALTER TABLE `+n.Qualified+` ATTACH PARTITION `+legacy+` FOR VALUES FROM (MINVALUE) TO (`+at+`)`,
	)
}

// syncDeadColumns gives the dead-letter table each column a migration
// added to the outbox table, with its default, so that dead rows move
// there whole and back again.
func (d *Driver) syncDeadColumns(ctx context.Context, tx conn) error {
	pn := d.names.part()
	var adds []string
	err := tx.query(ctx, `SELECT quote_ident(a.attname), format_type(a.atttypid, a.atttypmod),
		coalesce(' DEFAULT ' || pg_get_expr(ad.adbin, ad.adrelid), '')
		FROM pg_attribute a
		LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity = ''
		  AND NOT EXISTS (SELECT 1 FROM pg_attribute b
		                  WHERE b.attrelid = $2::regclass AND b.attname = a.attname AND NOT b.attisdropped)
		ORDER BY a.attnum`, []any{d.names.Qualified, pn.dead}, func(scan func(...any) error) error {
		var name, typ, def string
		if err := scan(&name, &typ, &def); err != nil {
			return err
		}
		adds = append(adds, `ALTER TABLE `+pn.dead+` ADD COLUMN `+name+` `+typ+def)
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the columns the dead-letter table lacks: %w", err)
	}
	for _, s := range adds {
		if _, err := tx.exec(ctx, s); err != nil {
			return fmt.Errorf("adding a column to the dead-letter table: %w", err)
		}
	}
	return nil
}

func firstLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			return s[:i]
		}
	}
	return s
}
