package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// pauseTarget is what --topic or --destination names.
type pauseTarget struct{ topic, destination *string }

func addPauseTarget(f *flagSet, verb string) pauseTarget {
	return pauseTarget{
		topic:       f.LocalString("topic", "", verb+" this `topic`"),
		destination: f.LocalString("destination", "", verb+" every topic routed to this `destination` (as herald relay's routes name it)"),
	}
}

// parse returns the kind and name given: exactly one of --topic and
// --destination, not blank, no control characters.
func (p pauseTarget) parse(inv *invocation) (herald.PauseKind, string, error) {
	if err := noArgs(inv); err != nil {
		return "", "", err
	}
	kind, name := herald.PauseTopic, *p.topic
	switch {
	case *p.topic != "" && *p.destination != "":
		return "", "", usagef("give --topic or --destination, not both")
	case *p.destination != "":
		kind, name = herald.PauseDestination, *p.destination
	case *p.topic == "":
		return "", "", usagef("give --topic T or --destination D")
	}
	if strings.TrimSpace(name) == "" || strings.ContainsFunc(name, unicode.IsControl) || len(name) > heraldadmin.MaxPauseText {
		return "", "", usagef("--%s: %q is not a %s name", kind, clean(name), kind)
	}
	return kind, name, nil
}

func setupPause(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	target := addPauseTarget(f, "pause")
	reason := f.LocalString("reason", "", "why, for other operators (herald status, the admin page)")
	relayAdmin := f.String("relay-admin", "", "check --destination against the destinations of the relay whose admin server is at this `URL` (http://127.0.0.1:9464)")
	force := f.LocalBool("force", "pause a --destination that is not known yet: one no relay at --relay-admin has, or, without it, one never paused before")
	return func(ctx context.Context, inv *invocation) error {
		kind, name, err := target.parse(inv)
		if err != nil {
			return err
		}
		if len(*reason) > heraldadmin.MaxPauseText || strings.ContainsRune(*reason, 0) {
			return usagef("--reason: at most %d bytes of text", heraldadmin.MaxPauseText)
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
		if kind == herald.PauseDestination && !*force {
			if err := checkDestinationKnown(ctx, inv, driver, adminURL, name); err != nil {
				return err
			}
		}
		err = driver.Pause(ctx, heraldadmin.PauseParams{Kind: kind, Name: name, Reason: *reason, By: cliActor()})
		if err != nil {
			return err
		}
		fmt.Fprintf(inv.stdout, "paused %s %q: every relay stops claiming its events within %s; they wait, ready, until herald resume --%s\n",
			kind, clean(name), herald.PauseRefresh, kind)
		return nil
	}
}

// checkDestinationKnown refuses to pause a destination that is not known,
// most likely a typo, which would pause nothing and say it did. The
// destinations are the relay's flags, which the CLI does not see: a running
// relay's admin server (--relay-admin) names them; without one the only
// names the database holds are those of destinations paused before (no
// relay writes its destinations down). A destination no relay has yet can
// be paused ahead of time, with --force.
func checkDestinationKnown(ctx context.Context, inv *invocation, driver outbox, adminURL, name string) error {
	var known []string
	if adminURL != "" {
		ds, err := fetchDestinations(ctx, inv, adminURL)
		if err != nil {
			return fmt.Errorf("--relay-admin: %w (to pause without checking the destination, add --force)", err)
		}
		for _, d := range ds {
			known = append(known, d.Name)
		}
		if slices.Contains(known, name) {
			return nil
		}
		return usagef("--destination: the relay at %s has no destination %q (%sit has %s); to pause it ahead of a relay that will have it, add --force",
			strings.TrimSuffix(adminURL, "/destinations"), clean(name), didYouMean(name, known...), quotedList(known))
	}
	pauses, err := driver.Pauses(ctx)
	if err != nil {
		return err
	}
	for _, p := range pauses {
		if p.Kind == herald.PauseDestination && !slices.Contains(known, p.Name) {
			known = append(known, p.Name)
		}
	}
	if slices.Contains(known, name) {
		return nil
	}
	seen := "no destination was paused before on this table"
	if len(known) > 0 {
		slices.Sort(known)
		seen = didYouMean(name, known...) + "destinations paused before on this table: " + quotedList(known)
	}
	return usagef("--destination: %q is not a known destination (%s); herald pause cannot see a relay's --destination flags: "+
		"check against a running relay with --relay-admin URL, or pause it ahead of time with --force", clean(name), seen)
}

// quotedList spells names as "a", "b", "c", at most ten of them.
func quotedList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	var parts []string
	for i, n := range names {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		parts = append(parts, fmt.Sprintf("%q", clean(n)))
	}
	return strings.Join(parts, ", ")
}

func setupResume(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	target := addPauseTarget(f, "resume")
	return func(ctx context.Context, inv *invocation) error {
		kind, name, err := target.parse(inv)
		if err != nil {
			return err
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		ok, err := driver.Resume(ctx, kind, name)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(inv.stdout, "%s %q was not paused; nothing changed\n", kind, clean(name))
			return nil
		}
		fmt.Fprintf(inv.stdout, "resumed %s %q: relays claim its events again, in order, within %s\n", kind, clean(name), herald.PauseRefresh)
		return nil
	}
}

// cliActor names who runs the CLI, for a pause's author: user@host.
func cliActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		name += "@" + host
	}
	return "herald CLI: " + name
}

// pausedJSON is a pause in force in `herald status --json`.
type pausedJSON struct {
	Kind   herald.PauseKind `json:"kind"`
	Name   string           `json:"name"`
	Reason string           `json:"reason"`
	By     string           `json:"by"`
	Since  time.Time        `json:"since"`
	// Waiting counts the ready events it holds; for a destination only
	// with --relay-admin (which knows the routes), else -1. It is -1 with
	// --relay-admin too when that relay has no such destination (the text
	// output shows "-") or could not count.
	Waiting int64 `json:"waiting"`
}

// pausedOf returns the pauses in force with what each holds: topics'
// counts from the status, destinations' from the relay's /destinations.
func pausedOf(pauses []herald.Pause, st heraldadmin.Status, dests []destinationJSON) []pausedJSON {
	var ready []heraldadmin.TopicBacklog
	for _, t := range st.Topics {
		if t.State == heraldadmin.StateReady {
			ready = append(ready, heraldadmin.TopicBacklog{Topic: t.Topic, Ready: t.Count})
		}
	}
	out := []pausedJSON{}
	for _, h := range heraldadmin.HeldBy(pauses, ready, nil) {
		p := pausedJSON{Kind: h.Kind, Name: h.Name, Reason: h.Reason, By: h.By, Since: h.Since.UTC(), Waiting: h.Waiting}
		for _, d := range dests {
			if h.Kind == herald.PauseDestination && d.Name == h.Name && d.Waiting != nil {
				p.Waiting = *d.Waiting
			}
		}
		out = append(out, p)
	}
	return out
}

// printPaused prints the pauses in force. relay is the admin server that
// counted the destinations' waiting events (dests is its answer), "" without
// --relay-admin.
func printPaused(w io.Writer, ps []pausedJSON, relay string, dests []destinationJSON) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PAUSED\tNAME\tWAITING\tSINCE\tBY\tREASON")
	var unknown, notThere, uncounted, opening bool
	for _, p := range ps {
		waiting := fmt.Sprint(p.Waiting)
		if p.Waiting < 0 {
			switch {
			case relay == "":
				waiting, unknown = "?", true
			case len(dests) == 0:
				waiting, opening = "?", true
			case !slices.ContainsFunc(dests, func(d destinationJSON) bool { return d.Name == p.Name }):
				// No topic of that relay routes to it: it holds none of the
				// relay's events, whatever other relays route to it.
				waiting, notThere = "-", true
			default:
				waiting, uncounted = "?", true
			}
		}
		since := p.Since
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Kind, truncate(clean(p.Name), 40), waiting, fmtTime(&since),
			truncate(clean(p.By), 30), truncate(clean(p.Reason), 50))
	}
	tw.Flush()
	if unknown {
		fmt.Fprintln(w, "a destination's waiting events: add --relay-admin URL (the relay knows the routes)")
	}
	if notThere {
		names := make([]string, 0, len(dests))
		for _, d := range dests {
			names = append(names, d.Name)
		}
		fmt.Fprintf(w, "-: not a destination of the relay at %s (it has %s), which routes no events to it\n", relay, quotedList(names))
	}
	if opening {
		fmt.Fprintf(w, "?: the relay at %s cannot count them yet: it has no destinations open\n", relay)
	}
	if uncounted {
		fmt.Fprintf(w, "?: the relay at %s could not count the waiting events (it could not read the outbox)\n", relay)
	}
	fmt.Fprintln(w, "resume: herald resume --topic T | --destination D")
}

// destinationOf names the destination a topic's events go to: the one
// destination, or the router's pick.
func (d *destinations) destinationOf(topic string) string {
	if d.router != nil {
		return d.router.DestinationOf(topic)
	}
	return d.names[0]
}

// destinationOf is the running relay's destinationOf, for the metrics and
// the admin page; "" before the destinations are opened.
func (s *relayStatus) destinationOf(topic string) string {
	if dests := s.getDests(); dests != nil {
		return dests.destinationOf(topic)
	}
	return ""
}

// withPauses marks the paused destinations of ds with the ready events
// they hold. A failed read leaves ds as they are: /destinations answers
// with the breakers whatever the database does.
func (s *relayStatus) withPauses(ctx context.Context, admin heraldadmin.Admin, ds []destinationJSON) []destinationJSON {
	pauses, err := admin.Pauses(ctx)
	if err != nil || len(pauses) == 0 {
		return ds
	}
	backlog, err := admin.Backlog(ctx)
	if err != nil {
		return ds
	}
	for _, h := range heraldadmin.HeldBy(pauses, backlog, s.destinationOf) {
		for i := range ds {
			if h.Kind == herald.PauseDestination && ds[i].Name == h.Name {
				ds[i].Paused, ds[i].Waiting = true, &h.Waiting
			}
		}
	}
	return ds
}

// destinationNames names the running relay's destinations, for the admin
// page's pause form.
func (s *relayStatus) destinationNames() []string {
	if dests := s.getDests(); dests != nil {
		return dests.names
	}
	return nil
}
