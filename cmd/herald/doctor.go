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

	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/publish/heraldnats"
)

// herald doctor: what the database's settings and the outbox's state hold
// against the relay, each finding with its fix. The PostgreSQL checks and
// their wording are heraldpg.Driver.Diagnose's; this file adds the
// destinations and prints.

// finding is one line of herald doctor, and the documented shape of one
// element of its --json array.
type finding = heraldpg.Finding

// The checks doctor makes itself.
const (
	checkDatabase    = "database"
	checkDestination = "destination"
)

func setupDoctor(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	asJSON := f.LocalBool("json", "print a JSON array of {severity, check, message, fix} instead of a table")
	lease := f.Duration("lease", time.Minute, "the relay's lease: a transaction holding the xmin horizon longer than this `duration` is reported")
	source := f.String("source", "poll", "the relay's `source`, poll or cdc: with cdc, wal_level and the role's REPLICATION are checked")
	publisher := f.String("publisher", "", "check that the relay's destination `URL` can be reached (as herald relay --publisher)")
	dests := addDestinationFlags(f)
	nats := addNATSFlags(f)
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
		db, err := d.parseDB(inv, false)
		if err != nil {
			return err
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
		found, err := diagnoseDB(ctx, db, heraldpg.DiagnoseParams{Lease: *lease, CDC: *source == "cdc"})
		if err != nil {
			return err
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
			if found[i].Severity == heraldpg.SeverityError {
				errs++
			}
		}
		if *asJSON {
			if err := writeJSON(inv.stdout, found); err != nil {
				return err
			}
		} else {
			printFindings(inv.stdout, db.where, found)
		}
		if errs > 0 {
			return fmt.Errorf("doctor: %d finding(s) are errors", errs)
		}
		return nil
	}
}

// diagnoseDB connects and runs the database's checks: PostgreSQL's
// Diagnose, or a warning that the other databases are not checked yet.
func diagnoseDB(ctx context.Context, db *database, p heraldpg.DiagnoseParams) ([]finding, error) {
	pool, store, err := db.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	pg, ok := store.(*heraldpg.Driver)
	if !ok {
		return []finding{{Severity: heraldpg.SeverityWarning, Check: checkDatabase,
			Message: fmt.Sprintf("doctor checks PostgreSQL only for now; %s is %s", db.where, db.spec.Driver),
			Fix:     "herald status shows the outbox's backlog on every database"}}, nil
	}
	return pg.Diagnose(ctx, p)
}

// checkDestinations opens each destination as the relay would, and closes
// it: a broker that cannot be reached, or that refuses the configuration,
// is an error.
func checkDestinations(ctx context.Context, inv *invocation, log *slog.Logger, p *plan, natsCfg *heraldnats.Config) []finding {
	var out []finding
	for _, ep := range p.endpoints {
		_, closer, err := openSpec(ctx, inv, log, "doctor "+ownerName(), ep, natsCfg)
		if err == nil {
			closer()
			out = append(out, finding{Severity: heraldpg.SeverityOK, Check: checkDestination,
				Message: fmt.Sprintf("destination %s (%s) is reachable", ep.name, ep.display)})
			continue
		}
		fix := "check the destination's credentials, TLS files and options"
		var ue *unreachableError
		if errors.As(err, &ue) {
			fix = "start the broker, or check the address and the network between this host and it"
		}
		out = append(out, finding{Severity: heraldpg.SeverityError, Check: checkDestination,
			Message: fmt.Sprintf("destination %s: %s", ep.name, err), Fix: fix})
	}
	return out
}

// printFindings prints one line per finding: severity, check, what was
// found and the fix.
func printFindings(w io.Writer, where string, found []finding) {
	fmt.Fprintf(w, "herald doctor: %s\n\n", where)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tCHECK\tFINDING\tFIX")
	for _, f := range found {
		fix := f.Fix
		if fix == "" {
			fix = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Severity, f.Check, clean(f.Message), clean(fix))
	}
	tw.Flush()
}
