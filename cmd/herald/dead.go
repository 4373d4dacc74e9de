package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/internal/textsafe"
)

// Bounds of `dead list --limit`.
const (
	defaultListLimit = 100
	maxListLimit     = 10000
)

// Payload previews of `dead show`, in bytes.
const (
	textPreviewBytes = 4096
	hexPreviewBytes  = 512
)

// selector is how a dead command picks rows: ids, --topic or --all.
type selector struct {
	topic *string
	all   *bool
}

func addSelector(f *flagSet) selector {
	return selector{
		topic: f.LocalString("topic", "", "select the dead events of this `topic`"),
		all:   f.LocalBool("all", "select every dead event"),
	}
}

// filter builds the filter of exactly one of: ids, --topic, --all. With
// defaultAll, none means --all.
func (s selector) filter(ids []string, defaultAll bool) (heraldadmin.EventFilter, error) {
	f := heraldadmin.EventFilter{Topic: *s.topic, All: *s.all, State: heraldadmin.StateDead}
	for _, raw := range ids {
		id, err := parseID(raw)
		if err != nil {
			return f, err
		}
		f.IDs = append(f.IDs, id)
	}
	n := 0
	for _, set := range []bool{len(f.IDs) > 0, f.Topic != "", f.All} {
		if set {
			n++
		}
	}
	switch {
	case n == 0 && defaultAll:
		f.All = true
	case n != 1:
		return f, usagef("select dead events by ids, by --topic T or by --all: exactly one of them")
	}
	return f, nil
}

func parseID(raw string) (string, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return "", usagef("%q is not an event id (a UUID)", clean(raw))
	}
	return id.String(), nil
}

// checkListLimit refuses a --limit outside 1..maxListLimit.
func checkListLimit(limit int) error {
	if limit < 1 || limit > maxListLimit {
		return usagef("--limit: %d is not between 1 and %d", limit, maxListLimit)
	}
	return nil
}

func setupDeadList(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	sel := addSelector(f)
	limit := f.LocalInt("limit", defaultListLimit, fmt.Sprintf("list at most `N` events (1 to %d)", maxListLimit))
	asJSON := f.LocalBool("json", "print JSON instead of a table")
	return func(ctx context.Context, inv *invocation) error {
		if len(inv.args) > 0 {
			return usagef("dead list selects by --topic or --all, not by id: use herald dead show ID")
		}
		filter, err := sel.filter(nil, true)
		if err != nil {
			return err
		}
		if err := checkListLimit(*limit); err != nil {
			return err
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		// One more than asked tells whether there are more.
		filter.Limit = *limit + 1
		rows, err := driver.ListEvents(ctx, filter)
		if err != nil {
			return err
		}
		more := len(rows) > *limit
		rows = rows[:min(len(rows), *limit)]
		if *asJSON {
			out := deadListJSON{Events: make([]eventJSON, 0, len(rows)), More: more}
			for _, r := range rows {
				out.Events = append(out.Events, toEventJSON(r))
			}
			return writeJSON(inv.stdout, out)
		}
		printDeadList(inv.stdout, rows, more)
		return nil
	}
}

func printDeadList(w io.Writer, rows []heraldadmin.EventRow, more bool) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no dead events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tKEY\tATTEMPTS\tDEAD AT\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, truncate(clean(r.Topic), 40), truncate(clean(r.Key), 30),
			r.Attempt, fmtTime(r.DeadAt), truncate(clean(r.LastError), 80))
	}
	tw.Flush()
	if more {
		fmt.Fprintf(w, "%s shown; there are more: raise --limit or narrow with --topic\n", plural(len(rows), "dead event"))
	} else {
		fmt.Fprintln(w, plural(len(rows), "dead event"))
	}
}

func setupDeadShow(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	asJSON := f.LocalBool("json", "print JSON, with the whole payload in base64")
	return func(ctx context.Context, inv *invocation) error {
		if len(inv.args) != 1 {
			return usagef("dead show takes exactly one event id")
		}
		id, err := parseID(inv.args[0])
		if err != nil {
			return err
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		row, err := driver.GetEvent(ctx, id)
		if errors.Is(err, heraldadmin.ErrNotFound) {
			return fmt.Errorf("no event with id %s", id)
		}
		if err != nil {
			return err
		}
		if *asJSON {
			out := eventDetailJSON{eventJSON: toEventJSON(row), PayloadBase64: row.Payload}
			if out.PayloadBase64 == nil {
				out.PayloadBase64 = []byte{}
			}
			if utf8.Valid(row.Payload) {
				s := string(row.Payload)
				out.PayloadText = &s
			}
			return writeJSON(inv.stdout, out)
		}
		printEvent(inv.stdout, row)
		return nil
	}
}

func printEvent(w io.Writer, r heraldadmin.EventRow) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field := func(name, v string) { fmt.Fprintf(tw, "%s:\t%s\n", name, v) }
	field("id", r.ID)
	field("state", string(r.State))
	field("topic", clean(r.Topic))
	field("key", clean(r.Key))
	field("type", clean(r.Type))
	field("aggregate", clean(strings.Trim(r.AggregateType+" "+r.AggregateID, " ")))
	field("seq", fmt.Sprint(r.Seq))
	field("attempts", fmt.Sprint(r.Attempt))
	field("created at", r.CreatedAt.Format(time.RFC3339Nano))
	field("available at", r.AvailableAt.Format(time.RFC3339Nano))
	if r.ClaimedBy != "" {
		field("claimed by", clean(r.ClaimedBy))
	}
	if r.LeaseUntil != nil {
		field("lease until", fmtTime(r.LeaseUntil))
	}
	if r.PublishedAt != nil {
		field("published at", fmtTime(r.PublishedAt))
	}
	field("dead at", fmtTime(r.DeadAt))
	field("last error", clean(r.LastError))
	tw.Flush()

	fmt.Fprintf(w, "headers (%d):\n", len(r.Headers))
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		fmt.Fprintf(w, "  %s: %s\n", clean(name), clean(r.Headers[name]))
	}
	fmt.Fprintf(w, "payload (%s):\n", plural(len(r.Payload), "byte"))
	fmt.Fprint(w, preview(r.Payload))
}

// preview shows a payload as text when it is UTF-8, as a hex dump
// otherwise, truncated; control characters are escaped so that a payload
// cannot drive the operator's terminal.
func preview(p []byte) string {
	if len(p) == 0 {
		return ""
	}
	if utf8.Valid(p) {
		text, cut := p, ""
		if len(p) > textPreviewBytes {
			n := textPreviewBytes
			for n > 0 && !utf8.RuneStart(p[n]) {
				n--
			}
			text, cut = p[:n], fmt.Sprintf("\n... (%s more; see --json)", plural(len(p)-n, "byte"))
		}
		return cleanText(string(text)) + cut + "\n"
	}
	dump, cut := p, ""
	if len(p) > hexPreviewBytes {
		dump, cut = p[:hexPreviewBytes], fmt.Sprintf("... (%s more; see --json)\n", plural(len(p)-hexPreviewBytes, "byte"))
	}
	return "(not UTF-8 text: hex dump)\n" + hex.Dump(dump) + cut
}

func setupDeadRequeue(f *flagSet) func(context.Context, *invocation) error {
	return setupDeadChange(f, "requeued", func(ctx context.Context, a heraldadmin.Admin, fl heraldadmin.EventFilter) (int, error) {
		return a.RequeueDead(ctx, fl)
	})
}

func setupDeadDiscard(f *flagSet) func(context.Context, *invocation) error {
	resume := f.LocalBool("resume", "also discard dead events that hold back their key, letting the key's waiting events go on")
	return setupDeadChange(f, "discarded", func(ctx context.Context, a heraldadmin.Admin, fl heraldadmin.EventFilter) (int, error) {
		fl.Resume = *resume
		n, err := a.DiscardDead(ctx, fl)
		return n, parkedError(err)
	})
}

func setupDeadChange(f *flagSet, done string, change func(context.Context, heraldadmin.Admin, heraldadmin.EventFilter) (int, error)) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	sel := addSelector(f)
	return func(ctx context.Context, inv *invocation) error {
		filter, err := sel.filter(inv.args, false)
		if err != nil {
			return err
		}
		pool, driver, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		n, err := change(ctx, driver, filter)
		if err != nil {
			return err
		}
		fmt.Fprintf(inv.stdout, "%s %s", done, plural(n, "dead event"))
		if ids := len(slices.Compact(slices.Sorted(slices.Values(filter.IDs)))); ids > n {
			fmt.Fprintf(inv.stdout, " (%d of the %d ids given are not dead events)", ids-n, ids)
		}
		fmt.Fprintln(inv.stdout)
		return nil
	}
}

// deadListJSON is the documented shape of `herald dead list --json`.
type deadListJSON struct {
	Events []eventJSON `json:"events"` // ordered by seq; never null
	More   bool        `json:"more"`   // more dead events match than --limit
}

// eventJSON is the documented shape of an event in `herald dead ... --json`.
type eventJSON struct {
	ID            string `json:"id"`
	Seq           int64  `json:"seq"`
	Topic         string `json:"topic"`
	Key           string `json:"key"`
	Type          string `json:"type"`
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	EventVersion  int    `json:"event_version"`
	// AggregateVersion is null when the event has none.
	AggregateVersion *int64            `json:"aggregate_version"`
	State            heraldadmin.State `json:"state"`
	Attempts         int               `json:"attempts"`
	LastError        string            `json:"last_error"`
	CreatedAt        time.Time         `json:"created_at"`
	AvailableAt      time.Time         `json:"available_at"`
	DeadAt           *time.Time        `json:"dead_at"`
	PublishedAt      *time.Time        `json:"published_at"`
	LeaseUntil       *time.Time        `json:"lease_until"`
	ClaimedBy        string            `json:"claimed_by"`
	Headers          map[string]string `json:"headers"` // never null
	PayloadSize      int               `json:"payload_size"`
}

// eventDetailJSON is `herald dead show --json`: an event with its payload.
type eventDetailJSON struct {
	eventJSON
	PayloadBase64 []byte  `json:"payload_base64"` // the whole payload
	PayloadText   *string `json:"payload_text"`   // the payload when it is UTF-8, else null
}

func toEventJSON(r heraldadmin.EventRow) eventJSON {
	h := r.Headers
	if h == nil {
		h = map[string]string{}
	}
	var aggregateVersion *int64
	if r.AggregateVersion > 0 {
		aggregateVersion = &r.AggregateVersion
	}
	return eventJSON{
		ID: r.ID, Seq: r.Seq, Topic: r.Topic, Key: r.Key, Type: r.Type,
		AggregateType: r.AggregateType, AggregateID: r.AggregateID,
		EventVersion: r.EventVersion, AggregateVersion: aggregateVersion,
		State: r.State, Attempts: r.Attempt, LastError: r.LastError,
		CreatedAt: r.CreatedAt, AvailableAt: r.AvailableAt, DeadAt: r.DeadAt, PublishedAt: r.PublishedAt,
		LeaseUntil: r.LeaseUntil, ClaimedBy: r.ClaimedBy, Headers: h, PayloadSize: len(r.Payload),
	}
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func plural(n int, noun string) string { return textsafe.Plural(n, noun) }

func truncate(s string, n int) string { return textsafe.Truncate(s, n) }

// clean makes text from a row safe to show on one line (textsafe.Line).
func clean(s string) string { return textsafe.Line(s) }

// cleanText is clean keeping line breaks and tabs.
func cleanText(s string) string { return textsafe.Text(s) }
