package heraldpg

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/sqlstore"
	"github.com/herald-outbox/herald/internal/testenv"
)

const day = 24 * time.Hour

// newPartitioned migrates a partitioned outbox in a schema of its own and
// returns it with the start of the current interval by the database
// clock: the first partition's.
func newPartitioned(t *testing.T, pool *pgxpool.Pool, p *Partitioning) (*Driver, time.Time) {
	t.Helper()
	d, err := New(pool, &Config{Schema: testenv.Schema(t), Partition: p})
	require.NoError(t, err)
	require.NoError(t, d.Migrate(t.Context()))
	var now time.Time
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT now()`).Scan(&now))
	l, err := d.layout(t.Context(), d.db)
	require.NoError(t, err)
	require.True(t, l.partitioned)
	return d, binStart(now, l.settings.Interval)
}

// insertRows writes n rows of topic in state, created evenly over [from,
// from+span), with the relay's columns as a relay leaves them: published
// or dead a minute after creation, ready with nothing set.
func insertRows(t *testing.T, pool *pgxpool.Pool, d *Driver, topic, state string, from time.Time, span time.Duration, n int) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `INSERT INTO `+d.Table()+`
		(topic, key, payload, state, created_at, available_at, published_at, dead_at, last_error)
		SELECT $1, 'k' || (g % 100), '\x00', $2, c, c,
		       CASE WHEN $2 = 'published' THEN c + interval '1 minute' END,
		       CASE WHEN $2 = 'dead' THEN c + interval '1 minute' END,
		       CASE WHEN $2 = 'dead' THEN 'refused' END
		FROM generate_series(0, $5::integer - 1) g,
		     LATERAL (SELECT $3::timestamptz + g * ($4::bigint / $5::integer) * interval '1 microsecond' AS c) x`,
		topic, state, from, span.Microseconds(), n)
	require.NoError(t, err)
}

// indexDefsOf returns the definitions of a table's indexes, printed from
// that table's catalog rows alone. A filter on pg_indexes.indexdef is
// planned as a print of every index in the database before the schema is
// matched, and an index a parallel test drops meanwhile fails the query
// ("could not open relation with OID").
func indexDefsOf(t *testing.T, pool *pgxpool.Pool, schema, table string) []string {
	t.Helper()
	rows, err := pool.Query(t.Context(), `WITH mine AS MATERIALIZED (
			SELECT x.indexrelid FROM pg_index x
			JOIN pg_class c ON c.oid = x.indrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2)
		SELECT pg_get_indexdef(indexrelid) FROM mine ORDER BY 1`, schema, table)
	require.NoError(t, err)
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return defs
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(t.Context(), sql, args...).Scan(&n), sql)
	return n
}

// tableBytes is the size on disk of the outbox (every partition, with
// indexes and TOAST) and of its dead-letter table.
func tableBytes(t *testing.T, pool *pgxpool.Pool, d *Driver) int64 {
	t.Helper()
	return count(t, pool, `SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0) + pg_total_relation_size($2::regclass)
		FROM pg_inherits i WHERE i.inhparent = $1::regclass`, d.Table(), d.names.part().dead)
}

// A million events over ten simulated days, retention two days: the
// maintenance, run at the end of each day by an injected clock, drops the
// partitions whose rows are done, so the table never holds much more than
// retention's worth of rows; a partition that holds a stuck ready row is
// kept (and reported) until the row is published, its published rows
// deleted one by one meanwhile; dead rows move to the dead-letter table;
// and every row is accounted for. -short writes a tenth as many.
func TestPartitionedMillionEventsOverSimulatedDays(t *testing.T) {
	testenv.Long(t)
	t.Parallel()
	ctx := t.Context()
	perDay, days := 100_000, 10
	if testing.Short() {
		perDay = 10_000
	}
	const deadPerDay, stuck, retention = 10, 5, 2 * day
	pool := testenv.PostgresPool(t)
	d, day0 := newPartitioned(t, pool, &Partitioning{Interval: day, Ahead: 3})

	var (
		gone, deleted, moved int64
		daySize, maxSize     int64
		keptSeen             bool
	)
	stuckPartition := d.names.partitionName(day0.Add(2 * day))
	for i := range days {
		start := day0.Add(time.Duration(i) * day)
		insertRows(t, pool, d, "orders", "published", start, day-2*time.Minute, perDay-deadPerDay)
		insertRows(t, pool, d, "refused", "dead", start.Add(time.Hour), time.Hour, deadPerDay)
		if i == 2 {
			insertRows(t, pool, d, "stuck", "ready", start.Add(time.Hour), time.Hour, stuck)
		}
		if i == 6 { // the stuck rows are published at last
			_, err := pool.Exec(ctx, `UPDATE `+d.Table()+` SET state = 'published', published_at = $1 WHERE topic = 'stuck'`,
				start.Add(time.Hour))
			require.NoError(t, err)
		}
		rep, err := d.maintain(ctx, start.Add(day-time.Minute), retention, 10_000_000)
		require.NoError(t, err, "day %d", i)
		gone += rep.DroppedRows
		deleted += int64(rep.Deleted)
		moved += rep.MovedDead
		t.Logf("day %d: %+v", i, rep)
		if i == 5 {
			require.Contains(t, rep.Kept, stuckPartition, "day %d: the stuck rows keep their partition", i)
			keptSeen = true
			require.Positive(t, rep.Deleted, "day %d: the kept partition's published rows go row by row", i)
		}
		if i >= 3 && i != 5 { // on day 5 the one partition past retention is the stuck one
			require.Positive(t, rep.Dropped, "day %d: a day's partition is dropped", i)
		}
		parts, err := d.partitions(ctx, d.db)
		require.NoError(t, err)
		// retention's days, the current one, three ahead, the default,
		// and the stuck one while it is kept
		require.LessOrEqual(t, len(parts), 2+1+3+1+1+1, "day %d: %v", i, parts)
		size := tableBytes(t, pool, d)
		if i == 0 {
			daySize = size
		}
		maxSize = max(maxSize, size)
	}
	require.True(t, keptSeen)
	// Bounded: the table holds about retention's days and today, never
	// the ten days written (about 10 daySize if nothing were dropped).
	require.Less(t, maxSize, 6*daySize, "the largest the table got, against one day's rows (%d bytes)", daySize)

	// Nothing lost: every row is in the outbox, in the dead-letter table,
	// or went published with its partition or the cleaner.
	total := int64(days * perDay)
	left := count(t, pool, `SELECT count(*) FROM `+d.Table())
	dead := count(t, pool, `SELECT count(*) FROM `+d.names.part().dead)
	require.Equal(t, total+stuck, left+dead+gone+deleted, "left %d, dead-letter table %d, dropped %d, deleted %d",
		left, dead, gone, deleted)
	require.Equal(t, dead, moved)
	require.Equal(t, int64(days*deadPerDay), dead+count(t, pool, `SELECT count(*) FROM `+d.Table()+` WHERE state = 'dead'`),
		"every dead row is still there")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM `+d.Table()+` WHERE topic = 'stuck'`),
		"the stuck rows went with their partition once published past retention")
	st, err := d.Status(ctx)
	require.NoError(t, err)
	for _, ts := range st.Topics {
		if ts.Topic == "refused" {
			require.Equal(t, int64(days*deadPerDay), ts.Count, "status counts the dead-letter table's rows")
		}
	}

	// A backlog arrives: every claim form stays index probes, one per
	// partition, over the days of published rows still there.
	insertRows(t, pool, d, "new", "ready", day0.Add(time.Duration(days-1)*day), time.Hour, 20_000)
	exec(t, pool, `UPDATE `+d.Table()+` SET available_at = now() - interval '1 hour' WHERE topic = 'new'`)
	requirePartitionedIndexProbes(t, pool, d, "never analyzed")
	exec(t, pool, `ANALYZE `+d.Table())
	requirePartitionedIndexProbes(t, pool, d, "analyzed")
}

// A dead row outlives its partition: it moves to the dead-letter table,
// where operators list, read, requeue and discard it as before. A parked
// dead row keeps its partition, since its key waits on it.
func TestPartitionedDeadLettersOutliveTheirPartition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	d, day0 := newPartitioned(t, pool, &Partitioning{Interval: day})
	insertRows(t, pool, d, "t", "dead", day0.Add(time.Hour), time.Hour, 3)
	insertRows(t, pool, d, "t", "published", day0.Add(time.Hour), time.Hour, 2)
	var parked string
	require.NoError(t, pool.QueryRow(ctx, `UPDATE `+d.Table()+` SET parked = true
		WHERE id = (SELECT id FROM `+d.Table()+` WHERE state = 'dead' ORDER BY seq LIMIT 1) RETURNING id::text`).Scan(&parked))
	first := d.names.partitionName(day0)

	at := day0.Add(4 * day)
	rep, err := d.maintain(ctx, at, day, 1000)
	require.NoError(t, err)
	require.Equal(t, []string{first}, rep.Kept, "the parked row keeps the partition")
	require.Equal(t, 2, rep.Dropped, "the empty days after it go")
	require.Equal(t, 2, rep.Deleted, "the kept partition's published rows go one by one")

	n, err := d.DiscardDead(ctx, heraldadmin.EventFilter{IDs: []string{parked}, Resume: true})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	rep, err = d.maintain(ctx, at, day, 1000)
	require.NoError(t, err)
	t.Logf("%+v", rep)
	require.Equal(t, 1, rep.Dropped)
	require.Equal(t, int64(2), rep.MovedDead)
	require.Empty(t, rep.Kept)

	rows, err := d.ListEvents(ctx, heraldadmin.EventFilter{State: heraldadmin.StateDead, All: true})
	require.NoError(t, err)
	require.Len(t, rows, 2, "the dead rows are listed from the dead-letter table")
	ev, err := d.GetEvent(ctx, rows[0].ID)
	require.NoError(t, err)
	require.Equal(t, heraldadmin.StateDead, ev.State)
	require.Equal(t, "refused", ev.LastError)
	backlog, err := d.Backlog(ctx)
	require.NoError(t, err)
	require.Equal(t, []heraldadmin.TopicBacklog{{Topic: "t", Dead: 2}}, backlog)

	n, err = d.RequeueDead(ctx, heraldadmin.EventFilter{IDs: []string{rows[0].ID}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	envs, err := d.Claim(ctx, herald.ClaimParams{Token: uuid.NewString(), Owner: "t", Limit: 10, Lease: time.Minute,
		MaxBytes: 1 << 20})
	require.NoError(t, err)
	require.Len(t, envs, 1, "a requeued dead letter is claimed again")
	require.Equal(t, rows[0].ID, envs[0].ID)
	require.Equal(t, rows[0].Seq, envs[0].Seq, "it keeps its place in its key's order")

	n, err = d.DiscardDead(ctx, heraldadmin.EventFilter{IDs: []string{rows[1].ID}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM `+d.names.part().dead))
}

// A row created past the last partition waits in the default partition
// and moves into its own when maintenance creates it; one created before
// the first partition stays in the default one, where the cleaner deletes
// it row by row once published past retention.
func TestPartitionedDefaultPartitionIsDrained(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	d, day0 := newPartitioned(t, pool, &Partitioning{Interval: day, Ahead: 2})
	where := func(topic string) string {
		var rel string
		require.NoError(t, pool.QueryRow(ctx, `SELECT DISTINCT tableoid::regclass::text FROM `+d.Table()+` WHERE topic = $1`,
			topic).Scan(&rel))
		return rel
	}
	insertRows(t, pool, d, "future", "ready", day0.Add(10*day+time.Hour), time.Hour, 3)
	insertRows(t, pool, d, "past", "published", day0.Add(-5*day), time.Hour, 3)
	require.Contains(t, where("future"), d.names.part().defaultName)
	require.Contains(t, where("past"), d.names.part().defaultName)

	// A claimed row waits in the default partition until its claim ends:
	// its acknowledgement must find it where it was.
	_, err := pool.Exec(ctx, `UPDATE `+d.Table()+` SET state = 'claimed', claim_token = gen_random_uuid(),
		lease_until = now() + interval '1 minute' WHERE id = (SELECT id FROM `+d.Table()+` WHERE topic = 'future' LIMIT 1)`)
	require.NoError(t, err)
	rep, err := d.maintain(ctx, day0.Add(8*day+time.Hour), day, 2)
	require.NoError(t, err)
	require.Contains(t, where("future"), d.names.part().defaultName)
	require.Equal(t, 2, rep.Deleted, "the default partition's old published rows, two per run")
	_, err = pool.Exec(ctx, `UPDATE `+d.Table()+` SET state = 'ready', claim_token = NULL, lease_until = NULL WHERE topic = 'future'`)
	require.NoError(t, err)
	rep, err = d.maintain(ctx, day0.Add(8*day+time.Hour), day, 2)
	require.NoError(t, err)
	require.Contains(t, where("future"), d.names.partitionName(day0.Add(10*day)), "moved into its partition")
	require.Equal(t, 1, rep.Deleted, "and the last one")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM `+d.Table()+` WHERE topic = 'past'`))
	require.Equal(t, int64(3), count(t, pool, `SELECT count(*) FROM `+d.Table()+` WHERE topic = 'future' AND state = 'ready'`))
}

// Migrations after the partitioned table was made (such as one adding
// columns) run on it as on a plain one, and the dead-letter table takes
// every column the outbox gains, with its default.
func TestPartitionedTableTakesLaterMigrations(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	d, day0 := newPartitioned(t, pool, &Partitioning{})
	insertRows(t, pool, d, "t", "dead", day0.Add(time.Hour), time.Hour, 1)
	_, err := d.maintain(ctx, day0.Add(5*day), day, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM `+d.names.part().dead))

	later := append(append([]sqlstore.Migration(nil), migrations...), sqlstore.Migration{
		Version: latestVersion() + 100, Name: "later",
		SQL: `ALTER TABLE {{.Table}} ADD COLUMN later_column integer NOT NULL DEFAULT 1;
		      CREATE INDEX {{.Name}}_later_idx ON {{.Table}} (later_column) WHERE state = 'ready';`,
	})
	require.NoError(t, d.migrate(ctx, later))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM `+d.names.part().dead+` WHERE later_column = 1`))
	require.Equal(t, int64(1), count(t, pool, `SELECT count(*) FROM `+d.names.part().dead+` WHERE event_version = 1`),
		"and migration 007's columns, which came before the dead-letter table")
	// A partition created after the migration has the column and index.
	_, err = d.maintain(ctx, day0.Add(6*day), day, 100)
	require.NoError(t, err)
	laterIndexes := 0
	for _, def := range indexDefsOf(t, pool, d.names.Schema, d.names.partitionName(day0.Add(9*day))) {
		if strings.Contains(def, "later_column") {
			laterIndexes++
		}
	}
	require.Equal(t, 1, laterIndexes, "the partition's index on later_column")
	rows, err := d.ListEvents(ctx, heraldadmin.EventFilter{State: heraldadmin.StateDead, All: true})
	require.NoError(t, err)
	n, err := d.RequeueDead(ctx, heraldadmin.EventFilter{IDs: []string{rows[0].ID}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// Migrate with Config.Partition refuses a plain table that exists: the
// conversion is PartitionExisting's, on purpose. Bad settings are refused
// by name.
func TestPartitionedMigrateRefusesAPlainTable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	schema := testenv.Schema(t)
	plain, err := New(pool, &Config{Schema: schema})
	require.NoError(t, err)
	require.NoError(t, plain.Migrate(ctx))
	d, err := New(pool, &Config{Schema: schema, Partition: &Partitioning{}})
	require.NoError(t, err)
	require.ErrorContains(t, d.Migrate(ctx), "PartitionExisting")
	_, err = plain.MaintainPartitions(ctx, day, 10)
	require.ErrorIs(t, err, ErrNotPartitioned)

	for _, p := range []Partitioning{{Interval: time.Second}, {Interval: 90 * time.Second}, {Ahead: -1}, {Interval: 40 * day}} {
		_, err := New(pool, &Config{Partition: &p})
		require.ErrorContains(t, err, "Partitioning.", fmt.Sprint(p))
	}
}

// requirePartitionedIndexProbes is requireIndexProbes on a partitioned
// table: every claim form reads each partition through an index, but for
// the partitions that are empty (those created ahead), where a sequential
// scan reads no page; and takes its rows in order from the ready index
// (Merge Append), never by sorting every ready row.
func requirePartitionedIndexProbes(t *testing.T, pool *pgxpool.Pool, d *Driver, stats string) {
	t.Helper()
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		for _, f := range claimForms(d) {
			plan := explainPrepared(t, pool, mode, f.sql, f.args, noSortSQL)
			what := fmt.Sprintf("%s, %s, %s:\n%s", f.name, mode, stats, plan)
			if !strings.Contains(f.name, "acknowledgement") { // as in requireIndexProbes
				require.NotContains(t, plan, "Hash Join", what)
				require.NotContains(t, plan, "Merge Join", what)
			}
			for _, m := range seqScanOn.FindAllStringSubmatch(plan, -1) {
				if m[1] == d.names.Table+"_leases" { // a row per key in flight: see requireNoTableScan
					continue
				}
				require.Zero(t, count(t, pool, `SELECT pg_relation_size($1::regclass)`, d.names.qualify(m[1])),
					"a sequential scan of %s, which holds rows: %s", m[1], what)
			}
			if f.name == "unordered claim" {
				require.Contains(t, plan, "Merge Append", what)
			}
		}
	}
}

var seqScanOn = regexp.MustCompile(`Seq Scan on (\w+)`)

// The primary key is (id, created_at): one transaction cannot write an id
// twice, since its created_at is one now(); two transactions can, where
// the plain table refuses it (the README says so).
func TestPartitionedIdIsUniquePerTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	d, _ := newPartitioned(t, pool, &Partitioning{})
	id := uuid.NewString()
	insert := `INSERT INTO ` + d.Table() + ` (id, topic, payload) VALUES ($1, 't', 'x')`
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insert, id)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, insert, id)
	require.ErrorContains(t, err, "duplicate key", "the same transaction")
	require.NoError(t, tx.Rollback(ctx))

	_, err = pool.Exec(ctx, insert, id)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, insert, id)
	require.NoError(t, err, "another transaction, another created_at")
	require.Equal(t, int64(2), count(t, pool, `SELECT count(*) FROM `+d.Table()+` WHERE id = $1`, id))
}

// Migrate with Config.Partition on a partitioned table stores the new
// interval and number ahead: the partitions created from then on follow
// them, on from the last one.
func TestPartitionedSettingsChangeAtMigrate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testenv.PostgresPool(t)
	d, day0 := newPartitioned(t, pool, &Partitioning{Interval: day, Ahead: 1})
	hourly, err := New(pool, &Config{Schema: d.names.Schema, Partition: &Partitioning{Interval: time.Hour, Ahead: 2}})
	require.NoError(t, err)
	require.NoError(t, hourly.Migrate(ctx))

	// The daily partitions reach day0+2; at day0+2 plus 30 minutes, hourly
	// ones follow up to two hours past the current one.
	_, err = d.maintain(ctx, day0.Add(2*day+30*time.Minute), -1, 0)
	require.NoError(t, err)
	parts, err := d.partitions(ctx, d.db)
	require.NoError(t, err)
	var names []string
	for _, p := range parts {
		names = append(names, p.name)
	}
	require.Equal(t, []string{
		d.names.partitionName(day0), d.names.partitionName(day0.Add(day)),
		d.names.partitionName(day0.Add(2 * day)), d.names.partitionName(day0.Add(2*day + time.Hour)),
		d.names.partitionName(day0.Add(2*day + 2*time.Hour)),
		d.names.part().defaultName,
	}, names)
}
