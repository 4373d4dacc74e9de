package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
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
	return func(ctx context.Context, inv *invocation) error {
		kind, name, err := target.parse(inv)
		if err != nil {
			return err
		}
		if len(*reason) > heraldadmin.MaxPauseText || strings.ContainsRune(*reason, 0) {
			return usagef("--reason: at most %d bytes of text", heraldadmin.MaxPauseText)
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		err = driver.Pause(ctx, heraldadmin.PauseParams{Kind: kind, Name: name, Reason: *reason, By: cliActor()})
		if err != nil {
			return err
		}
		fmt.Fprintf(inv.stdout, "paused %s %q: every relay stops claiming its events within %s; they wait, ready, until herald resume --%s\n",
			kind, clean(name), herald.PauseRefresh, kind)
		return nil
	}
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
	// with --relay-admin (which knows the routes), else -1.
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

func printPaused(w io.Writer, ps []pausedJSON) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PAUSED\tNAME\tWAITING\tSINCE\tBY\tREASON")
	unknown := false
	for _, p := range ps {
		waiting := fmt.Sprint(p.Waiting)
		if p.Waiting < 0 {
			waiting, unknown = "?", true
		}
		since := p.Since
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Kind, truncate(clean(p.Name), 40), waiting, fmtTime(&since),
			truncate(clean(p.By), 30), truncate(clean(p.Reason), 50))
	}
	tw.Flush()
	if unknown {
		fmt.Fprintln(w, "a destination's waiting events: add --relay-admin URL (the relay knows the routes)")
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
