package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldprom"
	"github.com/herald-outbox/herald/heraldui"
)

// adminServer serves /metrics, /healthz and /readyz for a relay, from
// before it starts: while it waits for its database or a destination,
// /readyz says which and why.
type adminServer struct {
	srv   *http.Server
	addr  string // where it listens
	done  chan struct{}
	rates []*rateRecorder // one per database page
}

// adminTokenEnv holds the token that lets the admin page requeue and
// discard; without it the page is read-only. From the environment only.
const adminTokenEnv = "HERALD_ADMIN_TOKEN"

// checkAdminAddr refuses an --admin-addr that is not host:port, and
// returns it with a loopback host when none was given (:9464 listens on
// 127.0.0.1:9464; 0.0.0.0:9464 must be asked for).
func checkAdminAddr(inv *invocation, addr string) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", usagef("%s: %q is not host:port (such as 127.0.0.1:9464)", inv.flags.label("admin-addr"), clean(addr))
	}
	if host == "" {
		host = "127.0.0.1"
	}
	tok, err := inv.env(adminTokenEnv)
	if err != nil {
		return "", err
	}
	if tok != "" {
		inv.stderr.add(tok)
		if len(tok) < heraldui.MinTokenLen {
			return "", usagef("%s is shorter than %d characters", adminTokenEnv, heraldui.MinTokenLen)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// startAdmin listens on addr and serves the admin endpoints and page until
// stop.
func startAdmin(inv *invocation, log *slog.Logger, addr string, metrics http.Handler, status *relayStatus,
	admin heraldadmin.Admin, fl *fleet) (*adminServer, error) {
	token, err := inv.env(adminTokenEnv)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	rates, err := mountPages(mux, inv, log, token, status, admin, fl)
	stopRates := func() {
		for _, r := range rates {
			r.stop()
		}
	}
	if err != nil {
		stopRates()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		stopRates()
		return nil, fmt.Errorf("admin server: %w", err)
	}
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /destinations", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		dests := status.withPauses(r.Context(), admin, status.destinations())
		for i := range dests {
			dests[i].LastError = inv.stderr.scrub(herald.Scrub(dests[i].LastError))
		}
		_ = json.NewEncoder(w).Encode(destinationsJSON{Destinations: dests})
	})
	mux.HandleFunc("GET /relays", func(w http.ResponseWriter, r *http.Request) {
		serveRelays(w, r, inv, admin)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		rj := status.ready()
		rj.Database, rj.Destination, rj.Config = inv.stderr.scrub(rj.Database), inv.stderr.scrub(rj.Destination),
			inv.stderr.scrub(rj.Config)
		w.Header().Set("Content-Type", "application/json")
		if !rj.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rj)
	})
	fl.handle(mux, token, log.With("component", "herald.audit"))
	a := &adminServer{
		srv:   &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		addr:  ln.Addr().String(),
		done:  make(chan struct{}),
		rates: rates,
	}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "error", err)
		}
	}()
	if host, _, _ := net.SplitHostPort(a.addr); !net.ParseIP(host).IsLoopback() {
		log.Warn("admin server listens beyond loopback", "addr", a.addr)
	}
	mode := "read-only (set " + adminTokenEnv + " to requeue, discard, stop and start databases)"
	if token != "" {
		mode = "actions need the token"
	}
	log.Info("admin server listening", "addr", a.addr, "endpoints", "/ /metrics /healthz /readyz /destinations /relays /databases", "page", mode)
	return a, nil
}

// destinationsJSON is the documented shape of /destinations, which
// herald status --relay-admin reads.
type destinationsJSON struct {
	Destinations []destinationJSON `json:"destinations"`
}

type destinationJSON struct {
	Name     string `json:"name"`
	Breaker  string `json:"breaker"` // closed, open or half-open
	InFlight int    `json:"in_flight"`
	Failures int    `json:"failures"` // failed calls in a row
	// Paused: an operator paused the destination (herald pause); Waiting
	// then counts the ready events of the topics routed to it.
	Paused  bool   `json:"paused,omitempty"`
	Waiting *int64 `json:"waiting,omitempty"`
	// LastError is the destination's last failure, scrubbed of secrets,
	// kept after it recovers; LastErrorAt when it failed (a destination
	// without a breaker of its own has no time).
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
}

// readyJSON is the documented shape of /readyz.
type readyJSON struct {
	Ready bool `json:"ready"`
	// Starting: the relay waits for a database or a destination, named
	// in the error fields.
	Starting    bool   `json:"starting,omitempty"`
	Running     bool   `json:"running"`
	Database    string `json:"database_error,omitempty"`
	Destination string `json:"destination_error,omitempty"`
	// Config is a configuration error found while relaying: a webhook
	// destination whose address the address guard refuses.
	Config string `json:"config_error,omitempty"`
	// Databases is each database's part, in the order they were given.
	Databases []databaseJSON `json:"databases"`
}

// databaseJSON is one database in /readyz and /databases.
type databaseJSON struct {
	Name string `json:"name"`
	// State is starting (waiting for the database or the destinations),
	// running, stopped (by an operator) or failed (the database refused
	// the configuration).
	State       dbState `json:"state"`
	Ready       bool    `json:"ready"`
	Database    string  `json:"database_error,omitempty"`
	Destination string  `json:"destination_error,omitempty"`
	// CDC, for a running relay with --source cdc, is active while it
	// streams the slot and standby while another relay does (or it
	// reconnects). A standby is ready: it claims what the table holds
	// (write-backs, rows from before the switch) and takes the slot over
	// when the active relay goes, so it belongs behind the readiness
	// probe like the active one.
	CDC string `json:"cdc,omitempty"`
}

// The values of databaseJSON.CDC.
const (
	cdcActive  = "active"
	cdcStandby = "standby"
)

// relayStatus is what the admin server reports of the relay: what it waits
// for while it starts, then the running relays' health.
type relayStatus struct {
	plan *plan
	dbs  []*dbRelay

	mu         sync.Mutex
	waitingFor string // "destination NAME" while the destinations are opened
	waitErr    string
	dests      *destinations
}

// waiting records which destination the start waits for and why; "" when
// none. It implements waiter.
func (s *relayStatus) waiting(what, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitingFor, s.waitErr = what, why
}

// connected records the opened destinations.
func (s *relayStatus) connected(dests *destinations) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dests, s.waitingFor, s.waitErr = dests, "", ""
}

func (s *relayStatus) getDests() *destinations {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dests
}

// publisher is what every relay publishes through.
func (s *relayStatus) publisher() herald.Publisher { return s.getDests().pub }

// database is one database's part of /readyz.
func (d *dbRelay) ready(connected bool) databaseJSON {
	d.mu.Lock()
	state, relay, what, why, failed := d.state, d.relay, d.waitFor, d.waitErr, d.failErr
	src, cdc := d.source.(slotReader)
	d.mu.Unlock()
	dj := databaseJSON{Name: d.name, State: state}
	switch state {
	case dbStarting:
		if what == "destinations" && !connected {
			dj.Destination = "starting: waiting for the destinations"
		} else {
			dj.Database = why // "" while the first try runs
		}
	case dbFailed:
		dj.Database = failed
	case dbRunning:
		h := relay.Health()
		dj.Database, dj.Destination = h.Database, h.Destination
		dj.Ready = h.Running && h.Database == "" && h.Destination == ""
		if !h.Running {
			dj.State = dbStopped
		} else if cdc {
			dj.CDC = cdcStandby
			if src.Active() {
				dj.CDC = cdcActive
			}
		}
	}
	return dj
}

// ready is /readyz: ready once every database not stopped by an operator
// is relayed, its database and destinations answer, and no destination is
// refused by configuration. With several databases the error fields name
// each database at fault.
func (s *relayStatus) ready() readyJSON {
	s.mu.Lock()
	dests, what, why := s.dests, s.waitingFor, s.waitErr
	s.mu.Unlock()
	rj := readyJSON{Ready: dests != nil, Running: true, Databases: []databaseJSON{}}
	if dests != nil {
		rj.Config = dests.refused()
	} else if why != "" && strings.HasPrefix(what, "destination") {
		rj.Destination = why
	}
	var dbErrs, destErrs []string
	running := 0
	for _, d := range s.dbs {
		dj := d.ready(dests != nil)
		rj.Databases = append(rj.Databases, dj)
		prefix := ""
		if len(s.dbs) > 1 {
			prefix = d.name + ": "
		}
		if dj.Database != "" {
			dbErrs = append(dbErrs, prefix+dj.Database)
		}
		// A running relay's outage; a start's wait for the destinations
		// is told once, above.
		if dj.State == dbRunning && dj.Destination != "" && rj.Destination == "" && !slices.Contains(destErrs, dj.Destination) {
			destErrs = append(destErrs, dj.Destination)
		}
		switch dj.State {
		case dbStopped:
			continue
		case dbStarting:
			rj.Starting = true
		case dbRunning:
			running++
		}
		rj.Ready = rj.Ready && dj.Ready
		rj.Running = rj.Running && dj.State == dbRunning
	}
	if dests == nil {
		rj.Starting = true
	}
	rj.Running = rj.Running && running > 0
	if rj.Starting && len(dbErrs) == 0 && rj.Destination == "" && len(destErrs) == 0 {
		dbErrs = append(dbErrs, "starting: connecting")
	}
	rj.Ready = rj.Ready && rj.Running && rj.Config == ""
	rj.Database = strings.Join(dbErrs, "; ")
	if rj.Destination == "" {
		rj.Destination = strings.Join(destErrs, "; ")
	}
	return rj
}

// destinations is /destinations: each destination's breaker, none before
// they are opened.
func (s *relayStatus) destinations() []destinationJSON {
	dests := s.getDests()
	out := []destinationJSON{}
	switch {
	case dests == nil:
	case dests.router != nil:
		for _, d := range dests.router.Status() {
			dj := destinationJSON{Name: d.Name, Breaker: d.Breaker, InFlight: d.InFlight, Failures: d.Failures,
				LastError: d.LastError}
			if !d.LastErrorAt.IsZero() {
				dj.LastErrorAt = &d.LastErrorAt
			}
			out = append(out, dj)
		}
	default:
		// One destination, no breaker of its own: the relays' outage
		// state stands for it, open when any relay pauses for it.
		dj := destinationJSON{Name: dests.names[0], Breaker: "closed"}
		for _, d := range s.dbs {
			if r := d.ready(true); r.State == dbRunning && r.Destination != "" {
				dj.Breaker, dj.LastError = "open", r.Destination
			}
		}
		out = append(out, dj)
	}
	return out
}

// breakers is the destinations' breakers for the metrics, as
// /destinations gives them: a single destination's is the relays' outage
// state.
func (s *relayStatus) breakers() []heraldprom.Destination {
	var out []heraldprom.Destination
	for _, d := range s.destinations() {
		out = append(out, heraldprom.Destination{Name: d.Name, Breaker: d.Breaker})
	}
	return out
}

func (a *adminServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
	for _, r := range a.rates {
		r.stop()
	}
}

// mountPages mounts the admin page: at / for the first database (admin),
// and, when the relay serves several named databases, one page each at
// /db/NAME/, every page linking them all. It returns the pages' chart
// recorders, for the server to stop.
func mountPages(mux *http.ServeMux, inv *invocation, log *slog.Logger, token string, status *relayStatus,
	admin heraldadmin.Admin, fl *fleet) ([]*rateRecorder, error) {
	type page struct {
		prefix string
		admin  heraldadmin.Admin
		db     int // the database's index in status.dbs
	}
	pages := []page{{"", admin, 0}}
	var links []heraldui.DatabaseLink
	if fl != nil && fl.named && len(fl.dbs) > 1 {
		for i, d := range fl.dbs {
			pages = append(pages, page{"/db/" + d.name, d.store, i})
			links = append(links, heraldui.DatabaseLink{Name: d.name, Href: "/db/" + d.name + "/"})
		}
	}
	recorders := map[int]*rateRecorder{}
	var all []*rateRecorder
	for _, p := range pages {
		rates := recorders[p.db]
		if rates == nil {
			rates = newRateRecorder(status.sampler(p.db, p.admin))
			recorders[p.db] = rates
			all = append(all, rates)
		}
		var here []heraldui.DatabaseLink
		for i, l := range links {
			l.Current = i == p.db
			here = append(here, l)
		}
		h, err := heraldui.New(heraldui.Config{
			Admin: p.admin, Token: token, Rate: rates.points, Logger: log, Prefix: p.prefix, Databases: here,
			Audit:         log.With("component", "herald.audit"),
			DestinationOf: status.destinationOf, Destinations: status.destinationNames,
			DestinationStatus: status.pageDestinations, Replay: status.pageReplay(inv, p.admin),
		})
		if err != nil {
			return all, err
		}
		mux.Handle(p.prefix+"/", h)
	}
	return all, nil
}

// rateRecorder samples the relay's counts and the oldest pending age
// every few seconds and turns the samples into figures per minute, for the
// page's charts.
type rateRecorder struct {
	take func() rateSample
	quit chan struct{}
	done chan struct{}

	mu      sync.Mutex
	samples []rateSample // oldest first, the last rateWindow
}

// rateSample is one reading: counts since the relay started, and the age
// of the oldest waiting event then.
type rateSample struct {
	at            time.Time
	published     int64
	failed        int64 // attempts retried or made dead
	oldestPending time.Duration
}

const (
	rateEvery  = 5 * time.Second
	rateWindow = 15 * time.Minute
)

func newRateRecorder(take func() rateSample) *rateRecorder {
	r := &rateRecorder{take: take, quit: make(chan struct{}), done: make(chan struct{})}
	r.sample(time.Now())
	go func() {
		defer close(r.done)
		t := time.NewTicker(rateEvery)
		defer t.Stop()
		for {
			select {
			case now := <-t.C:
				r.sample(now)
			case <-r.quit:
				return
			}
		}
	}()
	return r
}

func (r *rateRecorder) sample(now time.Time) {
	s := r.take()
	s.at = now
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	for len(r.samples) > 0 && now.Sub(r.samples[0].at) > rateWindow {
		r.samples = r.samples[1:]
	}
}

// points returns the figures of each minute, oldest minute first: each
// sample's increase is counted in the minute it was taken, and a minute's
// oldest pending age is the largest sampled in it.
func (r *rateRecorder) points() []heraldui.RatePoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []heraldui.RatePoint
	for i := 1; i < len(r.samples); i++ {
		cur, prev := r.samples[i], r.samples[i-1]
		minute := cur.at.Truncate(time.Minute)
		if len(out) == 0 || !out[len(out)-1].Minute.Equal(minute) {
			out = append(out, heraldui.RatePoint{Minute: minute})
		}
		p := &out[len(out)-1]
		p.Published += max(cur.published-prev.published, 0)
		p.Failed += max(cur.failed-prev.failed, 0)
		p.OldestPending = max(p.OldestPending, cur.oldestPending)
	}
	return out
}

func (r *rateRecorder) stop() {
	close(r.quit)
	<-r.done
}
