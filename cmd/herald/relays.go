package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/herald-outbox/herald/heraldadmin"
)

// relayJSON is one running relay, from its last heartbeat, in the
// documented shapes of herald status --json and the admin server's
// /relays. Times are the database clock's.
type relayJSON struct {
	Owner       string    `json:"owner"`   // host/pid, as in claimed_by
	Version     string    `json:"version"` // the Herald it runs
	StartedAt   time.Time `json:"started_at"`
	HeartbeatAt time.Time `json:"heartbeat_at"`
	// LastClaimAt is the last claim that took events; null before one.
	LastClaimAt *time.Time `json:"last_claim_at"`
	Leased      int64      `json:"leased"`    // claimed rows it holds
	Published   int64      `json:"published"` // events it published since it started
}

// relaysJSON is the documented shape of the admin server's /relays.
type relaysJSON struct {
	Relays []relayJSON `json:"relays"`
}

// listRelays lists the relays running on the outbox table, oldest start
// first; ok is false when the driver records none (no heartbeats).
func listRelays(ctx context.Context, admin heraldadmin.Admin) (out []relayJSON, ok bool, err error) {
	lister, ok := admin.(heraldadmin.Relays)
	if !ok {
		return nil, false, nil
	}
	rs, err := lister.ListRelays(ctx)
	if err != nil {
		return nil, true, err
	}
	out = make([]relayJSON, 0, len(rs))
	for _, r := range rs {
		out = append(out, relayJSON{
			Owner: r.Owner, Version: r.Version, StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt,
			LastClaimAt: r.LastClaimAt, Leased: r.Leased, Published: r.Published,
		})
	}
	return out, true, nil
}

// printRelays prints the running relays. Their ages are measured from
// each one's last heartbeat, both times of the database clock, so that
// the clock of the host running herald status plays no part.
func printRelays(w io.Writer, rs []relayJSON) {
	fmt.Fprintln(w)
	if rs == nil {
		fmt.Fprintln(w, "relays: not recorded by this database's driver")
		return
	}
	if len(rs) == 0 {
		fmt.Fprintln(w, "relays: none running (none has written a heartbeat lately)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RELAY\tVERSION\tUP\tLEASED\tPUBLISHED\tLAST CLAIM")
	for _, r := range rs {
		last := "none yet"
		if r.LastClaimAt != nil {
			last = relayAge(r.HeartbeatAt.Sub(*r.LastClaimAt)) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", truncate(clean(r.Owner), 60), truncate(clean(r.Version), 40),
			relayAge(r.HeartbeatAt.Sub(r.StartedAt)), r.Leased, r.Published, last)
	}
	tw.Flush()
	fmt.Fprintf(w, "%s running; figures as of each one's last heartbeat (every 5s by default)\n", plural(len(rs), "relay"))
}

// relayAge is fmtAge, with 0s for none.
func relayAge(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	return fmtAge(d)
}

// serveRelays answers /relays: every relay running on the outbox table,
// this one and the others, from the database.
func serveRelays(w http.ResponseWriter, r *http.Request, inv *invocation, admin heraldadmin.Admin) {
	rs, ok, err := listRelays(r.Context(), admin)
	switch {
	case !ok:
		http.Error(w, "this database's driver records no relays", http.StatusNotImplemented)
		return
	case err != nil:
		http.Error(w, inv.stderr.scrub(err.Error()), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(relaysJSON{Relays: rs})
}
