package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/herald-outbox/herald"
)

func cmdMigrate(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	var c common
	f := newFlags("migrate", getenv, stderr)
	c.register(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return usagef("migrate takes no arguments")
	}
	ob, closeDB, err := openOutbox(ctx, &c)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "outbox table is up to date")
	return nil
}

// statusJSON is the stable shape of `herald status --json`.
type statusJSON struct {
	Topics               []topicJSON `json:"topics"`
	OldestPendingSeconds float64     `json:"oldest_pending_seconds"`
}

type topicJSON struct {
	Topic         string  `json:"topic"`
	State         string  `json:"state"`
	Count         int64   `json:"count"`
	OldestSeconds float64 `json:"oldest_seconds"`
}

func cmdStatus(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	var c common
	f := newFlags("status", getenv, stderr)
	c.register(f)
	asJSON := f.Bool("json", false, "print JSON")
	if err := f.parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return usagef("status takes no arguments")
	}
	ob, closeDB, err := openOutbox(ctx, &c)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := ob.Ping(ctx); err != nil {
		return err
	}
	st, err := ob.Status(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := statusJSON{Topics: []topicJSON{}, OldestPendingSeconds: st.OldestPending.Seconds()}
		for _, t := range st.Topics {
			out.Topics = append(out.Topics, topicJSON{t.Topic, string(t.State), t.Count, t.Oldest.Seconds()})
		}
		return writeJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSTATE\tCOUNT\tOLDEST")
	for _, t := range st.Topics {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", t.Topic, t.State, t.Count, t.Oldest.Round(time.Millisecond))
	}
	tw.Flush()
	if len(st.Topics) == 0 {
		fmt.Fprintln(stdout, "(the outbox is empty)")
	}
	fmt.Fprintf(stdout, "oldest pending: %s\n", st.OldestPending.Round(time.Millisecond))
	return nil
}

func cmdDead(ctx context.Context, args []string, getenv env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("dead needs a subcommand: list, show, requeue or discard")
	}
	sub, args := args[0], args[1:]
	var c common
	f := newFlags("dead "+sub, getenv, stderr)
	c.register(f)
	topic := f.String("topic", "", "select the dead events of this topic")
	all := f.Bool("all", false, "select every dead event")
	asJSON := f.Bool("json", false, "print JSON (list, show)")
	limit := f.Int("limit", 100, "most events to list")
	switch sub {
	case "list", "show", "requeue", "discard":
	default:
		return usagef("unknown dead subcommand %q: use list, show, requeue or discard", sub)
	}
	if err := f.parse(args); err != nil {
		return err
	}
	ids := f.Args()
	filter := herald.EventFilter{IDs: ids, Topic: *topic, All: *all, State: herald.StateDead, Limit: *limit}
	selectors := 0
	for _, b := range []bool{len(ids) > 0, *topic != "", *all} {
		if b {
			selectors++
		}
	}
	switch {
	case sub == "show" && (len(ids) != 1 || *topic != "" || *all):
		return usagef("dead show takes exactly one event id")
	case sub == "list" && len(ids) > 0:
		return usagef("dead list selects by --topic or --all, not by id (use dead show ID)")
	case sub == "list" && selectors == 0:
		filter.All = true
	case sub != "show" && selectors != 1:
		return usagef("dead %s: give event ids, --topic T or --all (exactly one of them)", sub)
	case *limit < 1:
		return usagef("--limit must be positive")
	}
	ob, closeDB, err := openOutbox(ctx, &c)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := ob.Ping(ctx); err != nil {
		return err
	}

	switch sub {
	case "list":
		evs, err := ob.ListEvents(ctx, filter)
		if err != nil {
			return err
		}
		if *asJSON {
			out := make([]eventJSON, 0, len(evs))
			for _, ev := range evs {
				out = append(out, toJSON(ev))
			}
			return writeJSON(stdout, out)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPTS\tDEAD SINCE\tLAST ERROR")
		for _, ev := range evs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ev.ID, ev.Topic, ev.Key, ev.Attempt,
				timeOrDash(ev.DeadAt), truncate(oneLine(ev.LastError), 80))
		}
		tw.Flush()
		fmt.Fprintf(stdout, "%d dead events listed\n", len(evs))
	case "show":
		ev, err := ob.GetEvent(ctx, ids[0])
		if errors.Is(err, herald.ErrNotFound) {
			return fmt.Errorf("no event with id %s", ids[0])
		}
		if err != nil {
			return err
		}
		if *asJSON {
			return writeJSON(stdout, toJSON(ev))
		}
		printEvent(stdout, ev)
	case "requeue":
		n, err := ob.RequeueDead(ctx, filter)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "requeued %d dead events\n", n)
	case "discard":
		n, err := ob.DiscardDead(ctx, filter)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "discarded %d dead events\n", n)
	}
	return nil
}

// eventJSON is the stable shape of an event in `herald dead ... --json`.
type eventJSON struct {
	ID            string            `json:"id"`
	Seq           int64             `json:"seq"`
	Topic         string            `json:"topic"`
	Key           string            `json:"key"`
	Type          string            `json:"type"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	Headers       map[string]string `json:"headers"`
	Payload       []byte            `json:"payload"` // base64
	State         string            `json:"state"`
	Attempts      int               `json:"attempts"`
	CreatedAt     time.Time         `json:"created_at"`
	AvailableAt   time.Time         `json:"available_at"`
	PublishedAt   *time.Time        `json:"published_at"`
	DeadAt        *time.Time        `json:"dead_at"`
	LastError     string            `json:"last_error"`
}

func toJSON(ev herald.EventRow) eventJSON {
	return eventJSON{ev.ID, ev.Seq, ev.Topic, ev.Key, ev.Type, ev.AggregateType, ev.AggregateID, ev.Headers,
		ev.Payload, string(ev.State), ev.Attempt, ev.CreatedAt, ev.AvailableAt, ev.PublishedAt, ev.DeadAt, ev.LastError}
}

func printEvent(w io.Writer, ev herald.EventRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", ev.ID)
	row("state", string(ev.State))
	row("topic", ev.Topic)
	row("key", ev.Key)
	row("type", ev.Type)
	row("aggregate", strings.TrimPrefix(ev.AggregateType+"/"+ev.AggregateID, "/"))
	row("attempts", fmt.Sprint(ev.Attempt))
	row("created", ev.CreatedAt.Format(time.RFC3339Nano))
	row("available", ev.AvailableAt.Format(time.RFC3339Nano))
	row("published", timeOrDash(ev.PublishedAt))
	row("dead since", timeOrDash(ev.DeadAt))
	row("last error", oneLine(ev.LastError))
	for name, v := range ev.Headers {
		row("header "+name, v)
	}
	tw.Flush()
	fmt.Fprintf(w, "payload (%d bytes):\n%s\n", len(ev.Payload), preview(ev.Payload, 2048))
}

// preview shows a payload as text when it is UTF-8, as hex otherwise,
// truncated to max bytes.
func preview(p []byte, max int) string {
	cut := ""
	if len(p) > max {
		p, cut = p[:max], fmt.Sprintf("\n... (%d more bytes)", len(p)-max)
	}
	if utf8.Valid(p) {
		return string(p) + cut
	}
	return hex.Dump(p) + cut
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "..."
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
