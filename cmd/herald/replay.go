package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Bounds of `herald replay`.
const (
	maxReplayBatch   = 1000
	defaultReplayMax = 500 // events per second
)

// replayFlags are the selection and pacing of `herald replay`. Selectors
// have no environment variable: a HERALD_ALL left in an environment must
// never widen a replay.
type replayFlags struct {
	topic, key, typ, since, until, to, after *string
	all, dryRun, newIDs                      *bool
	rate, batch                              *int
	publishTimeout                           *time.Duration
}

func addReplayFlags(f *flagSet) replayFlags {
	return replayFlags{
		topic:  f.LocalString("topic", "", "replay the published events of this `topic`"),
		key:    f.LocalString("key", "", "replay the published events of this `key` (--key '' selects events without one)"),
		typ:    f.LocalString("type", "", "replay the published events of this `type`"),
		since:  f.LocalString("since", "", "replay events written at or after this `time`: RFC 3339, or a duration ago such as 2h"),
		until:  f.LocalString("until", "", "replay events written before this `time`: RFC 3339, or a duration ago such as 30m"),
		all:    f.LocalBool("all", "replay every published event the outbox still holds"),
		to:     f.LocalString("to", "", "send every replayed event to this destination `NAME` instead of the one its topic routes to"),
		after:  f.LocalString("after", "", "resume after this `position`, as printed by a replay that stopped"),
		dryRun: f.LocalBool("dry-run", "count the events that would be replayed, by topic and destination, and publish nothing"),
		newIDs: f.LocalBool("new-ids", "give every replayed event a new id, so that consumers' and brokers' deduplication let it through; "+
			"by default events keep their ids"),
		rate:           f.LocalInt("rate", defaultReplayMax, "publish at most `N` events per second"),
		batch:          f.LocalInt("batch-size", 100, "publish up to `N` events together (at most 1000)"),
		publishTimeout: f.LocalDuration("publish-timeout", 20*time.Second, "publishing one batch may take up to this `duration`"),
	}
}

// filter builds the selection from the flags and the ids given as
// arguments; now anchors durations such as --since 2h.
func (r replayFlags) filter(inv *invocation, now time.Time) (heraldadmin.PublishedFilter, error) {
	f := heraldadmin.PublishedFilter{Topic: *r.topic, Type: *r.typ}
	for _, raw := range inv.args {
		id, err := parseID(raw)
		if err != nil {
			return f, err
		}
		f.IDs = append(f.IDs, id)
	}
	if _, set := inv.flags.source["key"]; set {
		f.Key = r.key
	}
	var err error
	if f.Since, err = parseWhen("--since", *r.since, now); err != nil {
		return f, err
	}
	if f.Until, err = parseWhen("--until", *r.until, now); err != nil {
		return f, err
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return f, usagef("--since must be before --until: the time range is empty")
	}
	narrowed := len(f.IDs) > 0 || f.Topic != "" || f.Key != nil || f.Type != "" || !f.Since.IsZero() || !f.Until.IsZero()
	switch {
	case *r.all && narrowed:
		return f, usagef("--all selects every published event: give it alone, or select by ids, --topic, --key, --type, --since, --until")
	case !*r.all && !narrowed:
		return f, usagef("select the events to replay: ids, --topic, --key, --type, --since or --until, or --all for every published event")
	case *r.rate < 1:
		return f, usagef("--rate: %d is not positive", *r.rate)
	case *r.batch < 1 || *r.batch > maxReplayBatch:
		return f, usagef("--batch-size: %d is not between 1 and %d", *r.batch, maxReplayBatch)
	case *r.publishTimeout <= 0:
		return f, usagef("--publish-timeout: %s is not positive", *r.publishTimeout)
	}
	if *r.after != "" {
		if f.After, err = parsePosition(*r.after); err != nil {
			return f, err
		}
	}
	return f, nil
}

// parseWhen reads a time as RFC 3339, or as a duration before now.
func parseWhen(label, s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usagef("%s: %q is neither an RFC 3339 time (2026-11-24T09:30:00Z) nor a positive duration ago (2h)", label, clean(s))
}

// formatPosition and parsePosition spell a heraldadmin.Position for
// --after: SEQ@PUBLISHED_AT.
func formatPosition(p heraldadmin.Position) string {
	return strconv.FormatInt(p.Seq, 10) + "@" + p.PublishedAt.UTC().Format(time.RFC3339Nano)
}

func parsePosition(s string) (heraldadmin.Position, error) {
	seq, at, ok := strings.Cut(strings.TrimSpace(s), "@")
	n, err := strconv.ParseInt(seq, 10, 64)
	t, terr := time.Parse(time.RFC3339Nano, at)
	if !ok || err != nil || terr != nil || n < 0 {
		return heraldadmin.Position{}, usagef("--after: %q is not a position such as 1234@2026-11-24T09:30:00.123456Z (a stopped replay prints it)", clean(s))
	}
	return heraldadmin.Position{PublishedAt: t, Seq: n}, nil
}

func setupReplay(f *flagSet) func(context.Context, *invocation) error {
	d := addDBFlags(f)
	publisher := f.String("publisher", "", "the destination `URL` of every topic, as for herald relay")
	dests := addDestinationFlags(f)
	natsFlags := addNATSFlags(f)
	r := addReplayFlags(f)
	return func(ctx context.Context, inv *invocation) error {
		log, err := d.logger(inv)
		if err != nil {
			return err
		}
		filter, err := r.filter(inv, time.Now())
		if err != nil {
			return err
		}
		var plan *plan
		if !*r.dryRun || strings.TrimSpace(*publisher) != "" || len(*dests.destinations) > 0 {
			if plan, err = dests.parsePlan(inv, *publisher); err != nil {
				return err
			}
			if *r.to != "" && !slices.ContainsFunc(plan.endpoints, func(ep endpoint) bool { return ep.name == *r.to }) {
				return usagef("--to: %q is not a destination", clean(*r.to))
			}
		}
		natsCfg, err := natsFlags.config(inv)
		if err != nil {
			return err
		}
		pool, store, err := d.open(ctx, inv)
		if err != nil {
			return err
		}
		defer pool.Close()
		rp := &replay{inv: inv, log: log, store: store, filter: filter, flags: r, plan: plan}
		if *r.dryRun {
			return rp.count(ctx)
		}
		host, _ := os.Hostname()
		owner := fmt.Sprintf("%s/%d replay", host, os.Getpid())
		opened, err := plan.connect(ctx, starter{inv: inv, log: log, status: &relayStatus{}, once: true},
			log, owner, natsCfg, *r.publishTimeout)
		if err != nil {
			return err
		}
		defer opened.close()
		return rp.run(ctx, opened)
	}
}

// replay is one run of `herald replay`.
type replay struct {
	inv    *invocation
	log    *slog.Logger
	store  outbox
	filter heraldadmin.PublishedFilter
	flags  replayFlags
	plan   *plan // nil for a dry run without destinations
}

// replayWork is what a replay does, for `herald replay` and for the admin
// page's replay through a running relay's destinations alike: it reads the
// selected published events page by page, in publication order, and
// counts them or publishes them again.
type replayWork struct {
	store  heraldadmin.Published
	filter heraldadmin.PublishedFilter
	pub    herald.Publisher          // nil for a count
	dest   func(topic string) string // names where an event goes
	newIDs bool
	batch  int // events a Publish call
	rate   int // events a second
	// publishTimeout bounds one batch's Publish call.
	publishTimeout time.Duration
	// scrub removes the secrets the caller knows of from error text.
	scrub func(string) string
}

// replayOutcome is what a replay published, or would publish.
type replayOutcome struct {
	total  int
	byDest map[string]int
	// byTopicDest counts by topic and destination (counts only).
	byTopicDest map[[2]string]int
	// stopped says why the replay ended early: an event a destination
	// did not confirm, or an interruption; with where to resume.
	stopped error
}

// pages calls page with each page of matching published events, in
// publication order, until it returns false or the events run out.
func (w replayWork) pages(ctx context.Context, limit int, page func([]heraldadmin.EventRow) (bool, error)) error {
	f := w.filter
	f.Limit = limit
	for {
		rows, err := w.store.ListPublished(ctx, f)
		if err != nil {
			return fmt.Errorf("reading published events: %s", w.scrub(herald.Scrub(err.Error())))
		}
		if len(rows) == 0 {
			return nil
		}
		next := rows[len(rows)-1].Position()
		if !after(next, f.After) {
			return fmt.Errorf("reading published events: event %s has a publication time that cannot be ordered (%v); replay it by id",
				rows[len(rows)-1].ID, rows[len(rows)-1].PublishedAt)
		}
		more, err := page(rows)
		if err != nil || !more {
			return err
		}
		f.After = next
	}
}

// count counts the matching events by topic and destination; past limit
// (when positive) it stops counting and reports limit+1.
func (w replayWork) count(ctx context.Context, limit int) (replayOutcome, error) {
	out := replayOutcome{byDest: map[string]int{}, byTopicDest: map[[2]string]int{}}
	err := w.pages(ctx, heraldadmin.MaxListLimit, func(rows []heraldadmin.EventRow) (bool, error) {
		for _, row := range rows {
			if limit > 0 && out.total > limit {
				return false, nil
			}
			d := w.dest(row.Topic)
			out.byTopicDest[[2]string{row.Topic, d}]++
			out.byDest[d]++
			out.total++
		}
		return true, nil
	})
	return out, err
}

// publish publishes the selected events in publication order, batch by
// batch, at most rate a second, and stops at the first event a
// destination does not confirm, saying where to resume.
func (w replayWork) publish(ctx context.Context) (replayOutcome, error) {
	out := replayOutcome{byDest: map[string]int{}}
	start := time.Now()
	confirmed := w.filter.After // the last event confirmed, in publication order
	err := w.pages(ctx, w.batch, func(rows []heraldadmin.EventRow) (bool, error) {
		batch := make([]herald.Envelope, len(rows))
		for i, row := range rows {
			batch[i] = row.Envelope
			if w.newIDs {
				batch[i].ID = herald.NewID()
			}
		}
		pctx, cancel := context.WithTimeout(ctx, w.publishTimeout)
		errs := batchErrors(w.pub.Publish(pctx, batch), len(batch))
		cancel()
		for i, err := range errs {
			if err != nil {
				resume := confirmed
				if i > 0 {
					resume = rows[i-1].Position()
				}
				out.stopped = fmt.Errorf("replay stopped at event %s (topic %s): %s\nresume with --after %s (events of this batch after it that were confirmed are sent again)",
					rows[i].ID, clean(rows[i].Topic), w.scrub(herald.Scrub(err.Error())), formatPosition(resume))
				for _, row := range rows[:i] {
					out.byDest[w.dest(row.Topic)]++
				}
				out.total += i
				return false, nil
			}
		}
		for _, row := range rows {
			out.byDest[w.dest(row.Topic)]++
		}
		out.total += len(rows)
		confirmed = rows[len(rows)-1].Position()
		if err := pace(ctx, start, out.total, w.rate); err != nil {
			out.stopped = fmt.Errorf("%w\nresume with --after %s", err, formatPosition(confirmed))
			return false, nil
		}
		return true, nil
	})
	return out, err
}

// work is the replay the flags ask for.
func (rp *replay) work() replayWork {
	return replayWork{store: rp.store, filter: rp.filter, dest: rp.destinationOf(), newIDs: *rp.flags.newIDs,
		batch: *rp.flags.batch, rate: *rp.flags.rate, publishTimeout: *rp.flags.publishTimeout, scrub: rp.inv.stderr.scrub}
}

// after reports whether p comes after q in publication order.
func after(p, q heraldadmin.Position) bool {
	return p.PublishedAt.After(q.PublishedAt) || p.PublishedAt.Equal(q.PublishedAt) && p.Seq > q.Seq
}

// destinationOf names where an event of topic goes: --to, the route, or
// "-" without destinations.
func (rp *replay) destinationOf() func(topic string) string {
	switch {
	case *rp.flags.to != "":
		return func(string) string { return *rp.flags.to }
	case rp.plan == nil:
		return func(string) string { return "-" }
	case rp.plan.direct():
		name := rp.plan.endpoints[0].name
		return func(string) string { return name }
	}
	router, err := rp.plan.router(nil, func(string) herald.Publisher { return herald.PublisherFunc(nil) }, nil)
	if err != nil { // parsePlan built the same router
		return func(string) string { return "-" }
	}
	return func(topic string) string { return cmp.Or(router.DestinationOf(topic), "(no route)") }
}

// count is --dry-run: the matching events by topic and destination.
func (rp *replay) count(ctx context.Context) error {
	res, err := rp.work().count(ctx, 0)
	if err != nil {
		return err
	}
	total, counts := res.total, res.byTopicDest
	rp.audit("replay dry run", "events", total)
	fmt.Fprintf(rp.inv.stdout, "would replay %s (dry run: nothing was published)\n", plural(total, "event"))
	if rp.plan == nil {
		// Without destinations there are no routes: no destination can be
		// named, and --to names one that nothing checked.
		unchecked := ""
		if *rp.flags.to != "" {
			unchecked = fmt.Sprintf("; --to %q is not checked", clean(*rp.flags.to))
		}
		fmt.Fprintf(rp.inv.stdout, "no destination given (--publisher or --destination): counted by topic only, not by destination%s; "+
			"a replay that publishes needs one\n", unchecked)
	}
	if total == 0 {
		fmt.Fprintln(rp.inv.stdout, noneToReplay)
		return nil
	}
	tw := tabwriter.NewWriter(rp.inv.stdout, 0, 4, 2, ' ', 0)
	if rp.plan == nil {
		fmt.Fprintln(tw, "TOPIC\tEVENTS")
	} else {
		fmt.Fprintln(tw, "TOPIC\tDESTINATION\tEVENTS")
	}
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b [2]string) int {
		return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1])
	}) {
		if rp.plan == nil {
			fmt.Fprintf(tw, "%s\t%d\n", clean(k[0]), counts[k]) // one destination a topic: "-" or --to
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%d\n", clean(k[0]), clean(k[1]), counts[k])
		}
	}
	return tw.Flush()
}

// noneToReplay says why a selection may find nothing.
const noneToReplay = "no published event matches: the relay keeps published events for --retention (24h by default), " +
	"and none with --delete-on-publish"

// audit writes one line of the audit log: who replayed what.
func (rp *replay) audit(msg string, args ...any) {
	f := rp.filter
	sel := []any{"topic", f.Topic, "type", f.Type, "ids", len(f.IDs), "all", *rp.flags.all, "new_ids", *rp.flags.newIDs, "to", *rp.flags.to}
	if f.Key != nil {
		sel = append(sel, "key", *f.Key)
	}
	if !f.Since.IsZero() {
		sel = append(sel, "since", f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		sel = append(sel, "until", f.Until.UTC().Format(time.RFC3339))
	}
	user := os.Getenv("USER")
	host, _ := os.Hostname()
	rp.log.With("component", "herald.audit").Info(msg, append(append(sel, "by", user+"@"+host), args...)...)
}

// run publishes the selected events (replayWork.publish) and reports.
func (rp *replay) run(ctx context.Context, opened *destinations) error {
	w := rp.work()
	w.pub = opened.pub
	if *rp.flags.to != "" {
		w.pub = opened.byName[*rp.flags.to]
	}
	rp.audit("replay started")
	res, err := w.publish(ctx)
	total, replayed, stopped := res.total, res.byDest, res.stopped
	rp.audit("replay finished", "events", total, "stopped", stopped != nil)
	fmt.Fprintf(rp.inv.stdout, "replayed %s", plural(total, "event"))
	if total > 0 {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(replayed)) {
			parts = append(parts, fmt.Sprintf("%s %d", name, replayed[name]))
		}
		fmt.Fprintf(rp.inv.stdout, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(rp.inv.stdout)
	if total == 0 && err == nil && stopped == nil {
		fmt.Fprintln(rp.inv.stdout, noneToReplay)
	}
	if err != nil {
		return err
	}
	return stopped
}

// batchErrors turns Publish's result into one error per event.
func batchErrors(err error, n int) []error {
	errs := make([]error, n)
	var be *herald.BatchError
	switch {
	case err == nil:
	case errors.As(err, &be) && len(be.Errs) == n:
		copy(errs, be.Errs)
	default:
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

// pace waits until n events are no more than rate a second since start.
func pace(ctx context.Context, start time.Time, n, rate int) error {
	due := start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("replay interrupted: %w", context.Cause(ctx))
	case <-t.C:
		return nil
	}
}
