package heraldpg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/herald-outbox/herald/driver/internal/doctor"
	"github.com/herald-outbox/herald/heraldspec"
)

// Severity is how much a Finding of Diagnose matters.
type Severity = heraldspec.Severity

// The severities of a Finding, worst first.
const (
	SeverityError   = heraldspec.SeverityError
	SeverityWarning = heraldspec.SeverityWarning
	SeverityOK      = heraldspec.SeverityOK
)

// Finding is one thing Diagnose found: how much it matters, which check
// found it, what it is (one line) and how to fix it (the SQL or command
// to run; empty when there is nothing to do).
type Finding = heraldspec.Finding

// The checks of Diagnose, in the order it reports them.
const (
	CheckSchema      = "schema"
	CheckXmin        = "xmin_horizon"
	CheckAutovacuum  = "autovacuum"
	CheckSlots       = "replication_slots"
	CheckWALLevel    = "wal_level"
	CheckReplication = "replication_role"
	CheckCDCSlot     = "cdc_slot"
	CheckCDCPub      = "cdc_publication"
	CheckPartitions  = "partitions"
	CheckClock       = "clock"
	CheckFairIndex   = "fair_index" // only with Config.FairBy
)

// DiagnoseParams are what Diagnose checks the database against; Slot
// and Publication are read when CDC is set, or the table's inserts are
// streamed.
type DiagnoseParams = heraldspec.DiagnoseParams

var _ heraldspec.Diagnoser = (*Driver)(nil)

// The thresholds of Diagnose's checks.
const (
	// slotWALLimit is the write-ahead log a slot may retain before it is
	// reported.
	slotWALLimit = 1 << 30
	// deadTuplesLimit and deadShare: more dead row versions than both
	// (a count and a share of the live ones) is autovacuum falling behind.
	deadTuplesLimit = 10_000
	deadShare       = 0.2
	// vacuumStale is how long without a vacuum, while dead rows pass
	// autovacuum's own threshold, counts as autovacuum falling behind.
	vacuumStale = 24 * time.Hour
)

// The doctor's SQL: catalog and statistics reads only, no lock on the
// outbox table. Durations travel as microseconds.
const (
	// doctorSettingsSQL reads the server's settings, the role's right to
	// replicate and the database's clock.
	doctorSettingsSQL = `SELECT current_setting('wal_level'), current_setting('max_slot_wal_keep_size'),
	current_setting('autovacuum')::bool, current_setting('track_counts')::bool,
	current_setting('autovacuum_vacuum_threshold')::float8, current_setting('autovacuum_vacuum_scale_factor')::float8,
	r.rolname, r.rolreplication OR r.rolsuper, clock_timestamp(), current_database()
FROM pg_roles r WHERE r.rolname = current_user`

	// doctorHoldersSQL finds the client sessions of this database whose
	// transaction, older than $1, holds a snapshot or an xid: vacuum can
	// remove no row version that died after it began, in any table, the
	// outbox's claimed and published rows included.
	doctorHoldersSQL = `SELECT pid, coalesce(usename, ''), coalesce(application_name, ''), coalesce(state, ''),
	(extract(epoch FROM clock_timestamp() - xact_start) * 1e6)::int8, coalesce(query, '')
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'
	AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
	AND xact_start < clock_timestamp() - make_interval(secs => $1::float8 / 1e6)
ORDER BY xact_start
LIMIT 10`

	// doctorPreparedSQL finds prepared transactions older than $1, which
	// hold the horizon as an open transaction does, with no session to end.
	doctorPreparedSQL = `SELECT gid, coalesce(owner::text, ''), (extract(epoch FROM clock_timestamp() - prepared) * 1e6)::int8
FROM pg_prepared_xacts
WHERE database = current_database() AND prepared < clock_timestamp() - make_interval(secs => $1::float8 / 1e6)
ORDER BY prepared
LIMIT 10`

	// doctorVacuumSQL reads every table that holds the outbox's rows (the
	// table, or each partition of a partitioned one: pg_partition_tree
	// returns nothing for a plain table): its autovacuum
	// option, its live and dead row versions, and how long ago it was
	// last vacuumed (NULL: never since the statistics were reset).
	doctorVacuumSQL = `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname), coalesce(array_to_string(c.reloptions, E'\n'), ''), coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
	(extract(epoch FROM clock_timestamp() - greatest(s.last_autovacuum, s.last_vacuum)) * 1e6)::int8
FROM (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf
	UNION SELECT oid FROM pg_class WHERE oid = $1::regclass AND relkind = 'r') t
JOIN pg_class c ON c.oid = t.relid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
ORDER BY 1`

	// doctorSlotsSQL reads every replication slot of the server: whether
	// a reader holds it, the horizons it holds and the write-ahead log it
	// keeps.
	// doctorPublicationSQL reads publication $1: whether it publishes
	// inserts and the table $2, or a partition of it (a publication
	// without publish_via_partition_root lists the partitions;
	// pg_partition_tree returns nothing for a plain table).
	doctorPublicationSQL = `SELECT p.pubinsert, EXISTS (SELECT 1 FROM pg_publication_tables t
	WHERE t.pubname = p.pubname
		AND format('%I.%I', t.schemaname, t.tablename)::regclass IN (SELECT relid FROM pg_partition_tree($2::regclass) UNION SELECT $2::regclass))
FROM pg_publication p WHERE p.pubname = $1`

	doctorSlotsSQL = `SELECT slot_name, slot_type, coalesce(plugin, ''), coalesce(database, ''), active,
	xmin IS NOT NULL, coalesce(age(xmin), 0), catalog_xmin IS NOT NULL, coalesce(age(catalog_xmin), 0),
	coalesce(pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_receive_lsn() ELSE pg_current_wal_lsn() END,
		restart_lsn), 0)::int8
FROM pg_replication_slots
ORDER BY slot_name`
)

// diagnosis is what Diagnose read from the database, before any of it is
// judged: findings turns it into Findings, so that every threshold and
// every word is in one place and tested without a server.
type diagnosis struct {
	// table is schema.name: the names match sqlstore.Identifier, so they
	// need no quotes, in a message or in the SQL of a fix.
	table, schema, name string
	version, latest     int
	streamed            bool // the table's inserts are streamed (read only when the table exists)

	walLevel, maxSlotWALKeep string
	autovacuum, trackCounts  bool
	avThreshold, avScale     float64
	role, database           string
	canReplicate             bool

	// dbNow is the database's clock, read between before and after on
	// the relay's.
	dbNow, before, after time.Time

	holders  []xminHolder
	prepared []preparedXact
	tables   []vacuumFacts // nil when the table does not exist
	slots    []slotFacts

	// parts is the partitioned table's layout; nil for a plain table.
	parts *partitionFacts

	// slot and publication are change-data-capture's (DiagnoseParams.CDC
	// only); pub is nil when the publication does not exist, or was not
	// read (no table).
	slot, publication string
	pub               *publicationFacts
}

// publicationFacts are change-data-capture's publication.
type publicationFacts struct {
	inserts bool // it publishes inserts
	covers  bool // it publishes the outbox table (or each of its partitions)
}

// partitionFacts are a partitioned outbox's settings and how far its
// partitions reach.
type partitionFacts struct {
	interval time.Duration
	ahead    int       // partitions maintenance keeps past the current one
	current  time.Time // the start of the interval holding the database's now
	covered  time.Time // the end of the partitions contiguous from current; current when none holds it
}

// partitionCoverage is where the partitions contiguous from cur end: cur
// when no partition holds cur.
func partitionCoverage(parts []partition, cur time.Time) time.Time {
	end := cur
	for moved := true; moved; {
		moved = false
		for _, p := range parts {
			if p.from != nil && p.to != nil && !p.from.After(end) && p.to.After(end) {
				end, moved = *p.to, true
			}
		}
	}
	return end
}

type xminHolder struct {
	pid          int32
	user, app    string
	state, query string
	age          time.Duration
}

type preparedXact struct {
	gid, owner string
	age        time.Duration
}

type vacuumFacts struct {
	name       string
	options    []string
	live, dead int64
	// sinceVacuum is how long ago it was last vacuumed; -1 for never.
	sinceVacuum time.Duration
}

type slotFacts struct {
	name, kind, plugin, database string
	active                       bool
	hasXmin, hasCatalog          bool
	xminAge, catalogAge          int64
	retained                     int64
}

// Diagnose reads the database's settings and the outbox's state and
// returns what it finds, in order: the table's migration version,
// transactions holding the xmin horizon longer than the lease, the
// table's autovacuum, the replication slots (and, for change-data-capture,
// wal_level and the role's REPLICATION), and the clocks. Each finding
// says how to fix it. It runs catalog and statistics reads only, and
// reads other sessions' queries through herald.Scrub. An error means the
// database could not be read; a missing table is a finding.
func (d *Driver) Diagnose(ctx context.Context, p DiagnoseParams) ([]Finding, error) {
	if p.Lease < 0 {
		return nil, errors.New("heraldpg: DiagnoseParams.Lease must not be negative")
	}
	if p.Lease == 0 {
		p.Lease = time.Minute
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	g := diagnosis{table: d.names.Schema + "." + d.names.Table, schema: d.names.Schema, name: d.names.Table}
	var err error
	if g.version, err = d.schemaVersion(ctx, d.db); err != nil {
		return nil, err
	}
	g.latest = latestVersion()
	g.before = p.Now()
	if err := queryRow(ctx, d.db, doctorSettingsSQL, nil, &g.walLevel, &g.maxSlotWALKeep, &g.autovacuum, &g.trackCounts,
		&g.avThreshold, &g.avScale, &g.role, &g.canReplicate, &g.dbNow, &g.database); err != nil {
		return nil, fmt.Errorf("heraldpg: doctor: reading settings: %w", err)
	}
	g.after = p.Now()
	lease := p.Lease.Microseconds()
	err = d.db.query(ctx, doctorHoldersSQL, []any{lease}, func(scan func(...any) error) error {
		var h xminHolder
		var age int64
		if err := scan(&h.pid, &h.user, &h.app, &h.state, &age, &h.query); err != nil {
			return err
		}
		h.age = time.Duration(age) * time.Microsecond
		g.holders = append(g.holders, h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: doctor: reading pg_stat_activity: %w", err)
	}
	err = d.db.query(ctx, doctorPreparedSQL, []any{lease}, func(scan func(...any) error) error {
		var x preparedXact
		var age int64
		if err := scan(&x.gid, &x.owner, &age); err != nil {
			return err
		}
		x.age = time.Duration(age) * time.Microsecond
		g.prepared = append(g.prepared, x)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: doctor: reading pg_prepared_xacts: %w", err)
	}
	if g.version > 0 {
		g.tables = []vacuumFacts{}
		err = d.db.query(ctx, doctorVacuumSQL, []any{d.names.Qualified}, func(scan func(...any) error) error {
			var v vacuumFacts
			var since *int64
			var options string
			if err := scan(&v.name, &options, &v.live, &v.dead, &since); err != nil {
				return err
			}
			v.options = strings.Split(options, "\n")
			v.sinceVacuum = -1
			if since != nil {
				v.sinceVacuum = time.Duration(*since) * time.Microsecond
			}
			g.tables = append(g.tables, v)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("heraldpg: doctor: reading the table's vacuum statistics: %w", err)
		}
		if g.version >= streamedVersion {
			if g.streamed, err = d.InsertsStreamed(ctx); err != nil {
				return nil, err
			}
		}
		l, err := d.readLayout(ctx, d.db)
		if err != nil {
			return nil, err
		}
		if l.partitioned {
			parts, err := d.partitions(ctx, d.db)
			if err != nil {
				return nil, err
			}
			cur := binStart(g.dbNow, l.settings.Interval)
			g.parts = &partitionFacts{interval: l.settings.Interval, ahead: l.settings.Ahead, current: cur,
				covered: partitionCoverage(parts, cur)}
		}
	}
	if p.CDC {
		g.slot, g.publication = p.Slot, p.Publication
		if g.slot == "" {
			g.slot = d.names.Table
		}
		if g.publication == "" {
			g.publication = d.names.Table
		}
		if g.version > 0 {
			err = d.db.query(ctx, doctorPublicationSQL, []any{g.publication, d.names.Qualified}, func(scan func(...any) error) error {
				g.pub = &publicationFacts{}
				return scan(&g.pub.inserts, &g.pub.covers)
			})
			if err != nil {
				return nil, fmt.Errorf("heraldpg: doctor: reading publication %s: %w", g.publication, err)
			}
		}
	}
	err = d.db.query(ctx, doctorSlotsSQL, nil, func(scan func(...any) error) error {
		var s slotFacts
		if err := scan(&s.name, &s.kind, &s.plugin, &s.database, &s.active, &s.hasXmin, &s.xminAge, &s.hasCatalog, &s.catalogAge, &s.retained); err != nil {
			return err
		}
		g.slots = append(g.slots, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("heraldpg: doctor: reading pg_replication_slots: %w", err)
	}
	out := g.findings(p)
	if f, ok := d.fairIndexFinding(ctx, g); ok {
		out = append(out, f)
	}
	return out, nil
}

// findings judges a diagnosis: every threshold and every word of the
// doctor's PostgreSQL findings.
func (g diagnosis) findings(p DiagnoseParams) []Finding {
	var out []Finding
	add := func(s Severity, check, msg, fix string) {
		out = append(out, Finding{Severity: s, Check: check, Message: msg, Fix: fix})
	}
	migrate := fmt.Sprintf("herald migrate --schema %s --table %s", g.schema, g.name)

	// 1. The migration version.
	out = append(out, doctor.Schema(g.table, g.version, g.latest, migrate))

	// 2. Transactions holding the xmin horizon.
	for _, h := range g.holders {
		sev := doctor.HeldSeverity(h.age, p.Lease)
		who := fmt.Sprintf("pid %d", h.pid)
		if h.user != "" || h.app != "" {
			who += fmt.Sprintf(" (user %s, application %q)", h.user, h.app)
		}
		add(sev, CheckXmin, fmt.Sprintf("%s has held the xmin horizon for %s, longer than the lease (%s), so vacuum cannot clear the outbox's dead rows; state %s, query: %s",
			who, roundAge(h.age), leaseText(p.Lease), h.state, quoteQuery(h.query)),
			fmt.Sprintf("SELECT pg_terminate_backend(%d); or make the application end its transactions", h.pid))
	}
	for _, x := range g.prepared {
		sev := doctor.HeldSeverity(x.age, p.Lease)
		add(sev, CheckXmin, fmt.Sprintf("prepared transaction %q (owner %s) has held the xmin horizon for %s, longer than the lease (%s)",
			x.gid, x.owner, roundAge(x.age), leaseText(p.Lease)),
			fmt.Sprintf("COMMIT PREPARED %s; or ROLLBACK PREPARED %s;", quoteLiteral(x.gid), quoteLiteral(x.gid)))
	}
	if len(g.holders) == 0 && len(g.prepared) == 0 {
		add(SeverityOK, CheckXmin, fmt.Sprintf("no transaction has held the xmin horizon longer than the lease (%s)", leaseText(p.Lease)), "")
	}

	// 3. Autovacuum.
	avBefore := len(out)
	if !g.autovacuum || !g.trackCounts {
		add(SeverityError, CheckAutovacuum, fmt.Sprintf("autovacuum is off for the whole server (autovacuum = %s, track_counts = %s): the outbox's dead rows are never cleared",
			onOff(g.autovacuum), onOff(g.trackCounts)),
			"ALTER SYSTEM SET autovacuum = on; ALTER SYSTEM SET track_counts = on; SELECT pg_reload_conf();")
	}
	for _, t := range g.tables {
		if autovacuumDisabled(t.options) {
			add(SeverityError, CheckAutovacuum, fmt.Sprintf("autovacuum is disabled on %s (autovacuum_enabled = false): its dead rows are never cleared", t.name),
				fmt.Sprintf("ALTER TABLE %s RESET (autovacuum_enabled);", t.name))
			continue
		}
		threshold := g.avThreshold + g.avScale*float64(t.live)
		overShare := t.dead > deadTuplesLimit && float64(t.dead) > deadShare*float64(t.live)
		stale := t.sinceVacuum > vacuumStale && float64(t.dead) > threshold
		if overShare || stale {
			last := "never vacuumed since the statistics were reset"
			if t.sinceVacuum >= 0 {
				last = "last vacuumed " + roundAge(t.sinceVacuum) + " ago"
			}
			add(SeverityWarning, CheckAutovacuum, fmt.Sprintf("autovacuum is behind on %s: %d dead row versions beside %d live, %s",
				t.name, t.dead, t.live, last),
				fmt.Sprintf("VACUUM (VERBOSE) %s; then end what holds the xmin horizon, or give autovacuum more workers or a higher cost limit", t.name))
		}
	}
	if len(out) == avBefore {
		if g.tables == nil {
			add(SeverityOK, CheckAutovacuum, "autovacuum is on for the server (no outbox table to look at)", "")
		} else {
			add(SeverityOK, CheckAutovacuum, fmt.Sprintf("autovacuum is on and keeping up on %s", g.table), "")
		}
	}

	// 4. Replication slots, and what change-data-capture needs.
	slotsBefore := len(out)
	for _, s := range g.slots {
		kept := fmt.Sprintf("%s of write-ahead log", bytesText(s.retained))
		over := s.retained > slotWALLimit
		drop := fmt.Sprintf("SELECT pg_drop_replication_slot(%s); if nothing reads it any more, else start its reader", quoteLiteral(s.name))
		switch {
		case s.hasXmin && !s.active:
			add(SeverityError, CheckSlots, fmt.Sprintf("%s slot %s is inactive and holds the xmin horizon (%d transactions old), so vacuum cannot clear dead rows; it keeps %s",
				s.kind, s.name, s.xminAge, kept), drop)
		case !s.active:
			sev := SeverityWarning
			if over {
				sev = SeverityError
			}
			held := ""
			if s.hasCatalog {
				held = fmt.Sprintf(", holds the catalog_xmin horizon (%d transactions old)", s.catalogAge)
			}
			add(sev, CheckSlots, fmt.Sprintf("%s slot %s is inactive: no reader%s; it keeps %s", s.kind, s.name, held, kept), drop)
		case over:
			add(SeverityWarning, CheckSlots, fmt.Sprintf("%s slot %s keeps %s (more than %s): its reader is behind", s.kind, s.name, kept, bytesText(slotWALLimit)),
				"make the slot's reader catch up (a stalled relay, a standby cut off)")
		case s.hasXmin:
			add(SeverityWarning, CheckSlots, fmt.Sprintf("%s slot %s holds the xmin horizon (%d transactions old; a standby's hot_standby_feedback)", s.kind, s.name, s.xminAge),
				"end the long queries on the standby, or turn hot_standby_feedback off there")
		}
	}
	if len(g.slots) > 0 && g.maxSlotWALKeep == "-1" {
		add(SeverityWarning, CheckSlots, fmt.Sprintf("max_slot_wal_keep_size is -1 with %d replication slot(s): a slot nobody reads keeps write-ahead log until the disk is full", len(g.slots)),
			"ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf();")
	}
	if len(out) == slotsBefore && len(g.slots) == 0 {
		add(SeverityOK, CheckSlots, "no replication slot", "")
	} else if len(out) == slotsBefore {
		add(SeverityOK, CheckSlots, fmt.Sprintf("%d replication slot(s), none inactive, holding the xmin horizon or keeping more than %s", len(g.slots), bytesText(slotWALLimit)), "")
	}
	if p.CDC || g.streamed {
		why := "--source cdc"
		if !p.CDC {
			why = "the table's inserts are streamed"
		}
		if g.walLevel != "logical" {
			add(SeverityError, CheckWALLevel, fmt.Sprintf("wal_level is %s; change-data-capture (%s) needs logical", g.walLevel, why),
				"ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL")
		} else {
			add(SeverityOK, CheckWALLevel, "wal_level is logical, as change-data-capture needs", "")
		}
		if !g.canReplicate {
			add(SeverityError, CheckReplication, fmt.Sprintf("role %s has no REPLICATION; change-data-capture (%s) needs it", g.role, why),
				fmt.Sprintf("ALTER ROLE %s REPLICATION;", quoteIdent(g.role)))
		} else {
			add(SeverityOK, CheckReplication, fmt.Sprintf("role %s may replicate, as change-data-capture needs", g.role), "")
		}
	}
	if p.CDC {
		out = append(out, g.cdcFindings()...)
	}

	// 5. A partitioned table's partitions: the one holding now, and Ahead
	// past it, which the relay's maintenance creates. Rows with no
	// partition go to the default one, which maintenance empties row by
	// row.
	if f := g.parts; f != nil {
		have := int(f.covered.Sub(f.current)/f.interval) - 1
		fix := "run a relay on the table (its maintenance creates them), or call heraldpg.Driver.MaintainPartitions"
		switch {
		case have < 0:
			add(SeverityError, CheckPartitions, fmt.Sprintf("no partition of %s holds the rows written now (from %s): they go to its default partition",
				g.table, f.current.UTC().Format(time.RFC3339)), fix)
		case have < f.ahead:
			add(SeverityWarning, CheckPartitions, fmt.Sprintf("%d of the %d partitions %s keeps ahead exist (its partitions end at %s)",
				have, f.ahead, g.table, f.covered.UTC().Format(time.RFC3339)), fix)
		default:
			add(SeverityOK, CheckPartitions, fmt.Sprintf("%s has its partition for now and %d ahead (to %s)",
				g.table, have, f.covered.UTC().Format(time.RFC3339)), "")
		}
	}

	// 6. The clocks.
	out = append(out, doctor.Clock(g.before, g.dbNow, g.after))
	return out
}

// autovacuumDisabled reads a table's reloptions as PostgreSQL reads a
// boolean: autovacuum_enabled set to a prefix of false, off or no, or 0.
func autovacuumDisabled(options []string) bool {
	for _, o := range options {
		name, value, _ := strings.Cut(o, "=")
		if !strings.EqualFold(strings.TrimSpace(name), "autovacuum_enabled") {
			continue
		}
		v := strings.ToLower(strings.Trim(strings.TrimSpace(value), `'"`))
		switch {
		case v == "0", v != "" && strings.HasPrefix("false", v), v != "" && strings.HasPrefix("no", v), v == "of" || v == "off":
			return true
		}
	}
	return false
}

func quoteQuery(q string) string       { return doctor.QuoteQuery(q) }
func leaseText(d time.Duration) string { return doctor.LeaseText(d) }
func roundAge(d time.Duration) string  { return doctor.RoundAge(d) }
func bytesText(n int64) string         { return doctor.BytesText(n) }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// quoteIdent quotes a role's name for the fix's SQL.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes a string for the fix's SQL.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// cdcFindings judges change-data-capture's slot and publication, which
// herald relay --source cdc reads: the slot's age and the write-ahead log
// it keeps are the replication_slots check's.
func (g diagnosis) cdcFindings() []Finding {
	var out []Finding
	add := func(s Severity, check, msg, fix string) {
		out = append(out, Finding{Severity: s, Check: check, Message: msg, Fix: fix})
	}
	var slot *slotFacts
	for i := range g.slots {
		if g.slots[i].name == g.slot {
			slot = &g.slots[i]
		}
	}
	switch {
	case slot == nil:
		add(SeverityError, CheckCDCSlot, fmt.Sprintf("replication slot %s does not exist: herald relay --source cdc cannot start", g.slot),
			fmt.Sprintf("herald relay --source cdc --cdc-slot %s --cdc-create-slot, for the table's first change-data-capture only "+
				"(a slot made later skips what was committed before it)", g.slot))
	case slot.kind != "logical" || slot.plugin != "pgoutput" || slot.database != g.database:
		what := slot.kind + " slot"
		if slot.kind == "logical" {
			what = fmt.Sprintf("logical slot of plugin %s on database %s", slot.plugin, slot.database)
		}
		add(SeverityError, CheckCDCSlot, fmt.Sprintf("replication slot %s is a %s; change-data-capture needs a logical slot of plugin pgoutput on database %s",
			g.slot, what, g.database),
			fmt.Sprintf("name another slot with --cdc-slot, or drop this one if nothing reads it: SELECT pg_drop_replication_slot(%s);", quoteLiteral(g.slot)))
	default:
		add(SeverityOK, CheckCDCSlot, fmt.Sprintf("replication slot %s is a logical slot of plugin pgoutput on database %s", g.slot, g.database), "")
	}
	if g.tables == nil {
		return out // no table: the schema finding says to migrate
	}
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert');", quoteIdent(g.publication), g.table)
	switch {
	case g.pub == nil:
		add(SeverityError, CheckCDCPub, fmt.Sprintf("publication %s does not exist: herald relay --source cdc cannot start", g.publication),
			create+" or start the relay once with --cdc-create-slot")
	case !g.pub.covers:
		add(SeverityError, CheckCDCPub, fmt.Sprintf("publication %s does not publish %s: the slot reads none of its events", g.publication, g.table),
			fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s;", quoteIdent(g.publication), g.table))
	case !g.pub.inserts:
		add(SeverityError, CheckCDCPub, fmt.Sprintf("publication %s does not publish inserts: the slot reads none of the events of %s", g.publication, g.table),
			fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert');", quoteIdent(g.publication)))
	default:
		add(SeverityOK, CheckCDCPub, fmt.Sprintf("publication %s publishes the inserts of %s", g.publication, g.table), "")
	}
	return out
}

// fairIndexFinding reports, for a driver with Config.FairBy, whether the
// index its claims probe is there; nothing without FairBy, or for "topic"
// (the key index serves it), or while the table does not exist.
func (d *Driver) fairIndexFinding(ctx context.Context, g diagnosis) (Finding, bool) {
	if d.fair == nil || d.fair.index == "" || g.version == 0 {
		return Finding{}, false
	}
	d.fairChecked.Store(false) // look again, whatever a claim found before
	fix := fmt.Sprintf("herald migrate --schema %s --table %s --fair-by %s", g.schema, g.name, d.fair.by)
	if err := d.fairIndexReady(ctx); err != nil {
		return Finding{Severity: SeverityError, Check: CheckFairIndex, Message: strings.TrimPrefix(err.Error(), "heraldpg: "), Fix: fix}, true
	}
	return Finding{Severity: SeverityOK, Check: CheckFairIndex,
		Message: fmt.Sprintf("claims fair by %s have their index %s", d.fair.by, d.fair.index)}, true
}
