package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/herald-outbox/herald/heraldspec"
	"github.com/herald-outbox/herald/internal/sqlstore"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// herald doctor: what the databases' settings and the outbox's state hold
// against the relay, each finding with its fix. The checks of a database
// and their wording are its driver's Diagnose (heraldspec.Diagnoser); a
// destination's target is its publisher's CheckTarget
// (heraldspec.TargetChecker). This file connects, labels and prints.

// finding is one line of herald doctor, and the documented shape of one
// element of its --json array: a database's findings carry its name
// ("default" for a plain --db), a destination's none.
type finding struct {
	Severity heraldspec.Severity `json:"severity"`
	Database string              `json:"database,omitempty"`
	Check    string              `json:"check"`
	Message  string              `json:"message"`
	Fix      string              `json:"fix"`
}

// The checks doctor makes itself.
const (
	checkDatabase          = "database"
	checkDestination       = "destination"
	checkDestinationTarget = "destination_target"
)

func setupDoctor(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	dbs := repeatable(f, "db")
	names := f.String("databases", "", "comma-separated database `NAMES` to check besides --db, each DSN read from "+
		"HERALD_DB_<NAME> or the file HERALD_DB_<NAME>_FILE names")
	asJSON := f.LocalBool("json", "print a JSON array of {severity, database, check, message, fix} instead of a table")
	lease := f.Duration("lease", time.Minute, "the relay's lease: a transaction open longer than this `duration` is reported")
	source := f.String("source", "poll", "the relay's `source`, poll or cdc: with cdc, wal_level, the role's REPLICATION, the slot and the publication are checked")
	slot := f.String("cdc-slot", "", "the logical replication slot of --source cdc (`name`); defaults to the table's name")
	publication := f.String("cdc-publication", "", "the publication of --source cdc (`name`); defaults to the table's name")
	publisher := f.String("publisher", "", "check that the relay's destination `URL` can be reached (as herald relay --publisher)")
	dests := addDestinationFlags(f)
	nats := addNATSFlags(f)
	fairBy := addFairByFlag(f)
	return func(ctx context.Context, inv *invocation) error {
		if err := noArgs(inv); err != nil {
			return err
		}
		log, err := d.logger(inv)
		if err != nil {
			return err
		}
		if *lease <= 0 {
			return usagef("%s: %s is not positive", inv.flags.label("lease"), *lease)
		}
		if *source != "poll" && *source != "cdc" {
			return usagef("%s: %q is not poll or cdc", inv.flags.label("source"), clean(*source))
		}
		for name, v := range map[string]string{"cdc-slot": *slot, "cdc-publication": *publication} {
			switch {
			case v != "" && *source != "cdc":
				return usagef("%s is only used with %s cdc", inv.flags.label(name), inv.flags.label("source"))
			case v != "" && !sqlstore.Identifier.MatchString(v):
				return usagef("%s: %q must match %s", inv.flags.label(name), clean(v), sqlstore.Identifier)
			}
		}
		srcs, named, err := databaseSources(inv, *dbs, *names)
		if err != nil {
			return err
		}
		var parsed []*database
		for _, src := range srcs {
			db, err := d.parseDatabase(inv, src)
			if err != nil {
				return err
			}
			if err := setFairBy(inv, db, *fairBy); err != nil {
				return err
			}
			parsed = append(parsed, db)
		}
		// Destinations are checked only when some are given: a doctor of
		// the database alone needs none.
		var p *plan
		if strings.TrimSpace(*publisher) != "" || len(*dests.destinations) > 0 {
			if p, err = dests.parsePlan(inv, *publisher); err != nil {
				return err
			}
		}
		natsCfg, err := nats.config(inv)
		if err != nil {
			return err
		}
		params := heraldspec.DiagnoseParams{Lease: *lease, CDC: *source == "cdc", Slot: *slot, Publication: *publication}
		var found []finding
		for i, db := range parsed {
			for _, f := range diagnoseDB(ctx, db, params) {
				found = append(found, finding{Severity: f.Severity, Database: srcs[i].name, Check: f.Check, Message: f.Message, Fix: f.Fix})
			}
		}
		if p != nil {
			found = append(found, checkDestinations(ctx, inv, log, p, natsCfg)...)
		}
		// Every word goes through the redactor: a message may quote a
		// session's query, a fix a name, and either must not carry the
		// DSN's or a destination's password.
		errs := 0
		for i := range found {
			found[i].Message = inv.stderr.scrub(found[i].Message)
			found[i].Fix = inv.stderr.scrub(found[i].Fix)
			if found[i].Severity == heraldspec.SeverityError {
				errs++
			}
		}
		if *asJSON {
			if err := writeJSON(inv.stdout, found); err != nil {
				return err
			}
		} else {
			var where []string
			for i, db := range parsed {
				if named {
					where = append(where, srcs[i].name+" ("+db.where+")")
				} else {
					where = append(where, db.where)
				}
			}
			printFindings(inv.stdout, strings.Join(where, ", "), named, found)
		}
		if errs > 0 {
			return fmt.Errorf("doctor: %d finding(s) are errors", errs)
		}
		return nil
	}
}

// diagnoseDB connects and runs the database's checks, its driver's
// Diagnose. A database that cannot be reached or read is an error
// finding, so that the other databases are still checked.
func diagnoseDB(ctx context.Context, db *database, p heraldspec.DiagnoseParams) []heraldspec.Finding {
	fail := func(err error) []heraldspec.Finding {
		return []heraldspec.Finding{{Severity: heraldspec.SeverityError, Check: checkDatabase,
			Message: err.Error(),
			Fix:     "start the database, or check the DSN, the credentials and the network between this host and it"}}
	}
	pool, store, err := db.connect(ctx)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	dg, ok := store.(heraldspec.Diagnoser)
	if !ok {
		return []heraldspec.Finding{{Severity: heraldspec.SeverityWarning, Check: checkDatabase,
			Message: fmt.Sprintf("the %s driver has no checks for herald doctor", db.spec.Driver),
			Fix:     "herald status shows the outbox's backlog on every database"}}
	}
	found, err := dg.Diagnose(ctx, p)
	if err != nil {
		return fail(err)
	}
	return found
}

// noTargetToCheck says, for each publisher that has no target to check,
// why: the broker needs nothing made before the first event.
var noTargetToCheck = map[string]string{
	"redis":   "Redis makes a stream on its first XADD",
	"mqtt":    "MQTT topics need no creating",
	"webhook": "a webhook's endpoint is its URL",
}

// checkDestinations opens each destination as the relay would, asks it
// whether the targets of its routes exist, and closes it: a broker that
// cannot be reached, or that refuses the configuration, or lacks a
// route's stream, queue or topic, is an error.
func checkDestinations(ctx context.Context, inv *invocation, log *slog.Logger, p *plan, natsCfg *heraldnats.Config) []finding {
	var out []finding
	add := func(s heraldspec.Severity, check, msg, fix string) {
		out = append(out, finding{Severity: s, Check: check, Message: msg, Fix: fix})
	}
	for _, ep := range p.endpoints {
		pub, closer, err := openSpec(ctx, inv, log, "doctor "+ownerName(), ep, natsCfg)
		if err != nil {
			fix := "check the destination's credentials, TLS files and options"
			var ue *unreachableError
			switch {
			case errors.As(err, &ue) && (ep.kind == "sqs" || ep.kind == "sns"):
				// Opening looks the queue or topic up: the broker is AWS.
				fix = "create the queue or topic the error names, or check the region, the endpoint and the network between this host and AWS"
			case errors.As(err, &ue):
				fix = "start the broker, or check the address and the network between this host and it"
			}
			add(heraldspec.SeverityError, checkDestination, fmt.Sprintf("destination %s: %s", ep.name, err), fix)
			continue
		}
		add(heraldspec.SeverityOK, checkDestination, fmt.Sprintf("destination %s (%s) is reachable", ep.name, ep.display), "")
		checker, ok := pub.(heraldspec.TargetChecker)
		if !ok {
			why := noTargetToCheck[ep.kind]
			if why == "" {
				why = "its publisher cannot tell"
			}
			add(heraldspec.SeverityOK, checkDestinationTarget, fmt.Sprintf("destination %s: nothing to check ahead: %s", ep.name, why), "")
			closer()
			continue
		}
		for _, topic := range targetTopics(p, ep.name) {
			f, err := checker.CheckTarget(ctx, topic)
			what := "the topics no route names"
			if topic != "" {
				what = "topic " + topic
			}
			if err != nil {
				add(heraldspec.SeverityWarning, checkDestinationTarget,
					fmt.Sprintf("destination %s: cannot tell whether the target of %s exists: %s", ep.name, what, inv.stderr.scrub(err.Error())),
					"check that the destination's credentials may read the broker's streams, queues or topics")
				continue
			}
			add(f.Severity, checkDestinationTarget, fmt.Sprintf("destination %s, %s: %s", ep.name, what, f.Message), f.Fix)
		}
		closer()
	}
	return out
}

// targetTopics are the topics (or routes' patterns) a destination is sent:
// its routes', a Debezium route's as it reshapes them, and "" for the
// topics no route names when it is the default destination.
func targetTopics(p *plan, name string) []string {
	var topics []string
	for _, r := range p.routes {
		if r.Destination != name {
			continue
		}
		if r.Debezium {
			// topic outbox.event.<aggregate_type>, whatever the route matched.
			topics = append(topics, "outbox.event.>")
		} else {
			topics = append(topics, r.Topic)
		}
	}
	if p.def == name {
		topics = append(topics, "")
	}
	return topics
}

// printFindings prints one line per finding: severity, check, what was
// found and the fix; with several databases, which one first.
func printFindings(w io.Writer, where string, named bool, found []finding) {
	fmt.Fprintf(w, "herald doctor: %s\n\n", where)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if named {
		fmt.Fprint(tw, "DATABASE\t")
	}
	fmt.Fprintln(tw, "SEVERITY\tCHECK\tFINDING\tFIX")
	for _, f := range found {
		fix := f.Fix
		if fix == "" {
			fix = "-"
		}
		if named {
			db := f.Database
			if db == "" {
				db = "-"
			}
			fmt.Fprintf(tw, "%s\t", db)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, f.Check, clean(f.Message), clean(fix))
	}
	tw.Flush()
}
