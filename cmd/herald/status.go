package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/herald-outbox/herald/driver/heraldmysql"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldspec"
)

func setupMigrate(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	printSQL := f.LocalBool("print-sql", "print the SQL that migrating runs, for goose, Flyway or Atlas, instead of running it (no connection; without --db, PostgreSQL's)")
	from := f.LocalInt("from", 0, "with --print-sql, the schema `version` the table is at (0: no table yet)")
	part := addPartitionFlags(f)
	fairBy := addFairByFlag(f)
	return func(ctx context.Context, inv *invocation) error {
		if _, err := d.logger(inv); err != nil {
			return err
		}
		var (
			db  *database
			err error
		)
		if *printSQL && strings.TrimSpace(*d.db) == "" {
			// Printing connects to nothing: without --db, the script is
			// PostgreSQL's, the default database.
			db, err = d.parsePostgresNames(inv)
		} else {
			db, err = d.parseDB(inv, true)
		}
		if err != nil {
			return err
		}
		if err := noArgs(inv); err != nil {
			return err
		}
		p, err := part.parse(db)
		if err != nil {
			return err
		}
		if err := setFairBy(inv, db, *fairBy); err != nil {
			return err
		}
		if *printSQL {
			if p != nil {
				return usagef("--print-sql prints the plain table's migrations only: create a partitioned table with herald migrate --partition")
			}
			return db.printMigrationSQL(inv, *from)
		}
		if p != nil && !*part.existing {
			db.names.Partition = p
		}
		if *from != 0 {
			return usagef("--from goes with --print-sql")
		}
		pool, driver, err := db.connect(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		before, _, err := driver.SchemaVersion(ctx)
		if err != nil {
			return err
		}
		if err := driver.Migrate(ctx); err != nil {
			return err
		}
		if *part.existing {
			pg, ok := driver.(*heraldpg.Driver)
			if !ok {
				return usagef("--partition-existing: the outbox table is not PostgreSQL's")
			}
			if err := pg.PartitionExisting(ctx, p); err != nil {
				return err
			}
			fmt.Fprintln(inv.stdout, "migrate: outbox table "+driver.Table()+" is partitioned by created_at")
		}
		// Ping checks the version the table is now at is the one this
		// herald knows.
		if err := driver.Ping(ctx); err != nil {
			return err
		}
		_, latest, err := driver.SchemaVersion(ctx)
		if err != nil {
			return err
		}
		made := p
		if *part.existing {
			made = nil // converted after it was made plain; said above
		}
		fmt.Fprintln(inv.stdout, migrated(driver.Table(), before, latest, made))
		if *fairBy != "" {
			fmt.Fprintln(inv.stdout, "migrate: claims fair by "+*fairBy+" have their index")
		}
		return nil
	}
}

// partitionFlags choose a partitioned outbox table (PostgreSQL only).
type partitionFlags struct {
	partition, existing *bool
	interval            *time.Duration
	ahead               *int
}

func addPartitionFlags(f *flagSet) *partitionFlags {
	return &partitionFlags{
		partition: f.LocalBool("partition", "create the outbox table partitioned by created_at, dropped by retention a partition at a time (PostgreSQL; a table that exists is converted by --partition-existing)"),
		existing:  f.LocalBool("partition-existing", "convert the plain outbox table that exists into a partitioned one, keeping every row; producers and relays wait for a moment (PostgreSQL)"),
		interval:  f.LocalDuration("partition-interval", 24*time.Hour, "with --partition or --partition-existing, the time `range` of one partition (1m to 744h)"),
		ahead:     f.LocalInt("partition-ahead", 3, "with --partition or --partition-existing, the `number` of partitions kept created past the current one (1 to 100)"),
	}
}

// parse returns the partitioning asked for, nil for none.
func (p *partitionFlags) parse(db *database) (*heraldpg.Partitioning, error) {
	if !*p.partition && !*p.existing {
		if *p.interval != 24*time.Hour || *p.ahead != 3 {
			return nil, usagef("--partition-interval and --partition-ahead go with --partition or --partition-existing")
		}
		return nil, nil
	}
	if db.names == nil {
		return nil, usagef("--partition and --partition-existing are for PostgreSQL only")
	}
	if *p.ahead < 1 || *p.interval <= 0 {
		// zero would mean the default in heraldpg.Partitioning
		return nil, usagef("--partition-ahead and --partition-interval must be positive")
	}
	out := &heraldpg.Partitioning{Interval: *p.interval, Ahead: *p.ahead}
	if err := (&heraldpg.Config{Partition: out}).Validate(); err != nil {
		return nil, usagef("%s", strings.TrimPrefix(err.Error(), "heraldpg: "))
	}
	return out, nil
}

// statusJSON is the documented shape of `herald status --json`.
type statusJSON struct {
	Schema string `json:"schema"` // empty on SQLite and MySQL
	Table  string `json:"table"`
	// Topics has one entry per topic and state present, ordered by topic
	// then state; never null.
	Topics []topicStatusJSON `json:"topics"`
	// Totals counts rows by state; every state is present.
	Totals map[heraldadmin.State]int64 `json:"totals"`
	// OldestPendingSeconds is the age of the oldest ready or claimed row,
	// 0 when there is none.
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	// Destinations are a running relay's destinations with their circuit
	// breakers, when --relay-admin names its admin server.
	Destinations []destinationJSON `json:"destinations,omitempty"`
	// Paused are the pauses in force (herald pause), with the ready
	// events each holds; never null.
	Paused []pausedJSON `json:"paused"`
	// Relays are the relays running on the table, from their heartbeats,
	// oldest start first; null only when the database's driver records
	// none.
	Relays []relayJSON `json:"relays"`
}

type topicStatusJSON struct {
	Topic         string            `json:"topic"`
	State         heraldadmin.State `json:"state"`
	Count         int64             `json:"count"`
	OldestSeconds float64           `json:"oldest_seconds"`
}

var states = []heraldadmin.State{heraldadmin.StateReady, heraldadmin.StateClaimed, heraldadmin.StatePublished, heraldadmin.StateDead}

func setupStatus(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	asJSON := f.LocalBool("json", "print JSON instead of a table")
	relayAdmin := f.String("relay-admin", "", "also show the destinations and circuit breakers of the relay whose admin server is at this `URL` (http://127.0.0.1:9464)")
	return func(ctx context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		adminURL, err := parseRelayAdmin(inv, *relayAdmin)
		if err != nil {
			return err
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		st, err := driver.Status(ctx)
		if err != nil {
			return err
		}
		out := statusJSON{
			Schema: schemaOf(d), Table: *d.table,
			Topics:               []topicStatusJSON{},
			Totals:               map[heraldadmin.State]int64{},
			OldestPendingSeconds: st.OldestPending.Seconds(),
		}
		for _, s := range states {
			out.Totals[s] = 0
		}
		for _, t := range st.Topics {
			out.Topics = append(out.Topics, topicStatusJSON{t.Topic, t.State, t.Count, t.Oldest.Seconds()})
			out.Totals[t.State] += t.Count
		}
		if adminURL != "" {
			if out.Destinations, err = fetchDestinations(ctx, inv, adminURL); err != nil {
				return err
			}
		}
		pauses, err := driver.Pauses(ctx)
		if err != nil {
			return err
		}
		out.Paused = pausedOf(pauses, st, out.Destinations)
		if out.Relays, _, err = listRelays(ctx, driver); err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(inv.stdout, out)
		}
		printStatus(inv.stdout, out, st, strings.TrimSuffix(adminURL, "/destinations"))
		return nil
	}
}

// printStatus prints the status; relay is the admin server the
// destinations were read from, "" without --relay-admin.
func printStatus(w io.Writer, out statusJSON, st heraldadmin.Status, relay string) {
	fmt.Fprintf(w, "outbox %s\n\n", strings.TrimPrefix(out.Schema+"."+out.Table, "."))
	if len(st.Topics) == 0 {
		fmt.Fprintln(w, "no rows")
		printRelays(w, out.Relays)
		printDestinations(w, out.Destinations, relay)
		printPaused(w, out.Paused, relay, out.Destinations)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSTATE\tCOUNT\tOLDEST")
	for _, t := range st.Topics {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", clean(t.Topic), t.State, t.Count, fmtAge(t.Oldest))
	}
	tw.Flush()
	fmt.Fprintf(w, "\ntotal: %d ready, %d claimed, %d published, %d dead\n",
		out.Totals[heraldadmin.StateReady], out.Totals[heraldadmin.StateClaimed],
		out.Totals[heraldadmin.StatePublished], out.Totals[heraldadmin.StateDead])
	if st.OldestPending > 0 {
		fmt.Fprintf(w, "oldest pending: %s\n", fmtAge(st.OldestPending))
	} else {
		fmt.Fprintln(w, "oldest pending: none")
	}
	printRelays(w, out.Relays)
	printDestinations(w, out.Destinations, relay)
	printPaused(w, out.Paused, relay, out.Destinations)
}

func printDestinations(w io.Writer, ds []destinationJSON, relay string) {
	if len(ds) == 0 {
		if relay != "" {
			fmt.Fprintf(w, "\nthe relay at %s has no destinations open yet\n", relay)
		}
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESTINATION\tBREAKER\tIN FLIGHT\tFAILURES IN A ROW")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", clean(d.Name), clean(d.Breaker), d.InFlight, d.Failures)
	}
	tw.Flush()
}

// parseRelayAdmin checks --relay-admin: an http(s) URL with a host.
func parseRelayAdmin(inv *invocation, raw string) (string, error) {
	if raw == "" {
		return "", nil
	}
	inv.stderr.add(userinfoSecrets(raw, true)...)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", usagef("%s: %q is not an http(s) URL such as http://127.0.0.1:9464", inv.flags.label("relay-admin"), inv.stderr.scrub(clean(raw)))
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/destinations"
	return u.String(), nil
}

// fetchDestinations reads a running relay's /destinations.
func fetchDestinations(ctx context.Context, inv *invocation, url string) ([]destinationJSON, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the relay's admin server: %s", inv.stderr.scrub(err.Error()))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the relay's admin server answered %s", resp.Status)
	}
	var out destinationsJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&out); err != nil {
		return nil, fmt.Errorf("the relay's admin server sent no destinations: %w", err)
	}
	return out.Destinations, nil
}

// fmtAge prints an age to a precision an operator can read.
func fmtAge(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return fmtDuration(d.Round(time.Second))
	}
	return fmtDuration(d.Round(time.Minute))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// schemaOf is the schema shown for the outbox: none on SQLite, nor on
// MySQL, where the database in the DSN is the schema.
func schemaOf(d *dbFlags) string {
	db := strings.ToLower(strings.TrimSpace(*d.db))
	if strings.HasPrefix(db, "sqlite:") || strings.HasPrefix(db, "mysql://") {
		return ""
	}
	return *d.schema
}

// migrated says what herald migrate did; partition is how a table it
// created is partitioned, nil for a plain one. Another process migrating
// at the same moment may have done it instead: the versions are read
// before and after, not inside the migration's lock.
func migrated(table string, before, latest int, partition *heraldpg.Partitioning) string {
	switch {
	case before == 0 && partition != nil:
		return fmt.Sprintf("migrate: created partitioned outbox table %s at schema version %d (by created_at, %s a partition, %d created ahead)",
			table, latest, fmtDuration(partition.Interval), partition.Ahead)
	case before == 0:
		return fmt.Sprintf("migrate: created outbox table %s at schema version %d", table, latest)
	case before < latest:
		return fmt.Sprintf("migrate: upgraded outbox table %s from schema version %d to %d", table, before, latest)
	}
	return fmt.Sprintf("migrate: outbox table %s is up to date (schema version %d)", table, latest)
}

// printMigrationSQL prints the migration script of the table --db and
// --table name, from schema version from.
func (db *database) printMigrationSQL(inv *invocation, from int) error {
	var (
		script string
		err    error
	)
	var target heraldspec.DatabaseTarget
	if db.spec != nil {
		target = db.spec.Target()
	}
	switch t := target.(type) {
	case *heraldsqlite.DSNConfig:
		script, err = heraldsqlite.MigrationSQL(&t.Config, from)
	case *heraldmysql.DSNConfig:
		script, err = heraldmysql.MigrationSQL(&t.Config, from)
	default:
		script, err = heraldpg.MigrationSQL(db.names, from)
	}
	if err != nil {
		return usagef("--from: %d is not a schema version this herald knows (0 up to its latest)", from)
	}
	_, err = io.WriteString(inv.stdout, script)
	return err
}
