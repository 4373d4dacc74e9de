package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldui"
)

// What the admin page asks of the running relay: its figures for the
// charts, its destinations' state, and replays through its destinations.

// sampleTimeout bounds the backlog read of one chart sample.
const sampleTimeout = 2 * time.Second

// sampler reads the counts of database db's relay and the oldest pending
// age of its table (admin), for its page's charts; zero counts before the
// relay started. A failed backlog read leaves the age at zero for that
// sample.
func (s *relayStatus) sampler(db int, admin heraldadmin.Admin) func() rateSample {
	return func() rateSample {
		var out rateSample
		if db < len(s.dbs) {
			st := s.dbs[db].stats()
			out.published, out.failed = st.Published, st.Retried+st.Dead
		}
		ctx, cancel := context.WithTimeout(context.Background(), sampleTimeout)
		defer cancel()
		if backlog, err := admin.Backlog(ctx); err == nil {
			for _, b := range backlog {
				out.oldestPending = max(out.oldestPending, b.OldestPending)
			}
		}
		return out
	}
}

// pageDestinations is the page's Destinations section: /destinations'
// breakers with each destination's last error. A single destination
// without a breaker of its own has the relay's outage as its state.
func (s *relayStatus) pageDestinations() []heraldui.Destination {
	dests := s.getDests()
	if dests == nil {
		return nil
	}
	if dests.router == nil {
		d := heraldui.Destination{Name: dests.names[0], Breaker: "closed"}
		for _, db := range s.dbs {
			if dj := db.ready(true); dj.State == dbRunning && dj.Destination != "" {
				d.Breaker, d.LastError = "open", dj.Destination
			}
		}
		return []heraldui.Destination{d}
	}
	var out []heraldui.Destination
	for _, d := range dests.router.Status() {
		out = append(out, heraldui.Destination{Name: d.Name, Breaker: d.Breaker, InFlight: d.InFlight, Failures: d.Failures,
			LastError: d.LastError, LastErrorAt: d.LastErrorAt})
	}
	return out
}

// Replays from the page publish in batches of this many events, each
// within this time, like `herald replay`'s defaults.
const (
	pageReplayBatch   = 100
	pageReplayTimeout = 20 * time.Second
)

// pageReplay replays from the page through the running relay's
// destinations, with the same work as `herald replay`: nil when the store
// cannot list published events.
func (s *relayStatus) pageReplay(inv *invocation, admin heraldadmin.Admin) func(context.Context, heraldui.ReplayRequest) (heraldui.ReplayResult, error) {
	published, ok := admin.(heraldadmin.Published)
	if !ok {
		return nil
	}
	return func(ctx context.Context, req heraldui.ReplayRequest) (heraldui.ReplayResult, error) {
		dests := s.getDests()
		if dests == nil {
			return heraldui.ReplayResult{}, errors.New("the relay has not started yet: its destinations are not open")
		}
		w := replayWork{store: published, filter: req.Filter, pub: dests.pub, batch: pageReplayBatch, rate: req.Rate, newIDs: req.NewIDs,
			publishTimeout: pageReplayTimeout, scrub: inv.stderr.scrub,
			dest: func(topic string) string { return cmp.Or(dests.destinationOf(topic), "(no route)") }}
		counted, err := w.count(ctx, req.Max)
		if err != nil {
			return heraldui.ReplayResult{}, err
		}
		if req.DryRun {
			return heraldui.ReplayResult{Events: counted.total, ByDestination: counted.byDest}, nil
		}
		if req.Max > 0 && counted.total > req.Max {
			return heraldui.ReplayResult{}, fmt.Errorf("more than %d events match: narrow the selection, or use herald replay", req.Max)
		}
		done, err := w.publish(ctx)
		res := heraldui.ReplayResult{Events: done.total, ByDestination: done.byDest}
		if done.stopped != nil {
			res.Stopped = herald.Scrub(done.stopped.Error())
		}
		return res, err
	}
}
