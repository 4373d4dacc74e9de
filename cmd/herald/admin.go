package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/cmd/herald/internal/adminui"
	"github.com/herald-outbox/herald/heraldadmin"
	"github.com/herald-outbox/herald/heraldprom"
)

// adminServer serves /metrics, /healthz and /readyz for a relay, from
// before it starts: while it waits for its database or a destination,
// /readyz says which and why.
type adminServer struct {
	srv   *http.Server
	addr  string // where it listens
	done  chan struct{}
	rates *rateRecorder
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
	if tok, _ := inv.getenv(adminTokenEnv); tok != "" {
		inv.stderr.add(tok)
		if len(tok) < adminui.MinTokenLen {
			return "", usagef("%s is shorter than %d characters", adminTokenEnv, adminui.MinTokenLen)
		}
	}
	return net.JoinHostPort(host, port), nil
}

// startAdmin listens on addr and serves the admin endpoints and page until
// stop.
func startAdmin(inv *invocation, log *slog.Logger, addr string, metrics *heraldprom.Metrics, status *relayStatus,
	admin heraldadmin.Admin) (*adminServer, error) {
	token, _ := inv.getenv(adminTokenEnv)
	rates := newRateRecorder(status.published)
	page, err := adminui.New(adminui.Config{
		Admin: admin, Token: token, Rate: rates.points, Logger: log,
		Audit: log.With("component", "herald.audit"),
	})
	if err != nil {
		rates.stop()
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		rates.stop()
		return nil, fmt.Errorf("admin server: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", page)
	mux.Handle("GET /metrics", metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /destinations", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(destinationsJSON{Destinations: status.destinations()})
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
	mode := "read-only (set " + adminTokenEnv + " to requeue and discard)"
	if token != "" {
		mode = "actions need the token"
	}
	log.Info("admin server listening", "addr", a.addr, "endpoints", "/ /metrics /healthz /readyz /destinations", "page", mode)
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
}

// readyJSON is the documented shape of /readyz.
type readyJSON struct {
	Ready bool `json:"ready"`
	// Starting: the relay waits for its database or a destination, named
	// in the error fields.
	Starting    bool   `json:"starting,omitempty"`
	Running     bool   `json:"running"`
	Database    string `json:"database_error,omitempty"`
	Destination string `json:"destination_error,omitempty"`
	// Config is a configuration error found while relaying: a webhook
	// destination whose address the address guard refuses.
	Config string `json:"config_error,omitempty"`
}

// relayStatus is what the admin server reports of the relay: what it waits
// for while it starts, then the running relay's health.
type relayStatus struct {
	mu         sync.Mutex
	waitingFor string // "database" or "destination NAME" while starting
	waitErr    string
	relay      *herald.Relay
	dests      *destinations
}

// waiting records what the start waits for and why; "" when nothing.
func (s *relayStatus) waiting(what, why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waitingFor, s.waitErr = what, why
}

// started records the running relay and its destinations.
func (s *relayStatus) started(relay *herald.Relay, dests *destinations) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.relay, s.dests, s.waitingFor, s.waitErr = relay, dests, "", ""
}

func (s *relayStatus) get() (*herald.Relay, *destinations) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.relay, s.dests
}

// ready is /readyz: ready once the relay runs, its database and
// destination answer, and no destination is refused by configuration.
func (s *relayStatus) ready() readyJSON {
	s.mu.Lock()
	relay, dests, what, why := s.relay, s.dests, s.waitingFor, s.waitErr
	s.mu.Unlock()
	if relay == nil {
		rj := readyJSON{Starting: true}
		if why == "" {
			why = "starting: connecting"
		}
		if strings.HasPrefix(what, "destination") {
			rj.Destination = why
		} else {
			rj.Database = why
		}
		return rj
	}
	h := relay.Health()
	rj := readyJSON{Running: h.Running, Database: h.Database, Destination: h.Destination, Config: dests.refused()}
	rj.Ready = h.Running && h.Database == "" && h.Destination == "" && rj.Config == ""
	return rj
}

// destinations is /destinations: each destination's breaker, none before
// the relay started.
func (s *relayStatus) destinations() []destinationJSON {
	relay, dests := s.get()
	out := []destinationJSON{}
	switch {
	case relay == nil:
	case dests.router != nil:
		for _, d := range dests.router.Status() {
			out = append(out, destinationJSON{Name: d.Name, Breaker: d.Breaker, InFlight: d.InFlight, Failures: d.Failures})
		}
	default:
		// One destination, no breaker of its own: the relay's outage
		// state stands for it.
		state := "closed"
		if relay.Health().Destination != "" {
			state = "open"
		}
		out = append(out, destinationJSON{Name: dests.names[0], Breaker: state})
	}
	return out
}

// breakers is the destinations' breakers for the metrics.
func (s *relayStatus) breakers() []heraldprom.Destination {
	var out []heraldprom.Destination
	if _, dests := s.get(); dests != nil && dests.router != nil {
		for _, d := range dests.router.Status() {
			out = append(out, heraldprom.Destination{Name: d.Name, Breaker: d.Breaker})
		}
	}
	return out
}

// published is the relay's published count, 0 before it started.
func (s *relayStatus) published() int64 {
	if relay, _ := s.get(); relay != nil {
		return relay.Stats().Published
	}
	return 0
}

func (a *adminServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
	a.rates.stop()
}

// rateRecorder samples the relay's published count every few seconds and
// turns the samples into events published per minute, for the page.
type rateRecorder struct {
	published func() int64
	quit      chan struct{}
	done      chan struct{}

	mu      sync.Mutex
	samples []rateSample // oldest first, the last rateWindow
}

type rateSample struct {
	at        time.Time
	published int64
}

const (
	rateEvery  = 5 * time.Second
	rateWindow = 15 * time.Minute
)

func newRateRecorder(published func() int64) *rateRecorder {
	r := &rateRecorder{published: published, quit: make(chan struct{}), done: make(chan struct{})}
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
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, rateSample{at: now, published: r.published()})
	for len(r.samples) > 0 && now.Sub(r.samples[0].at) > rateWindow {
		r.samples = r.samples[1:]
	}
}

// points returns events published per minute, oldest minute first: each
// sample's increase is counted in the minute it was taken.
func (r *rateRecorder) points() []adminui.RatePoint {
	r.sample(time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []adminui.RatePoint
	for i := 1; i < len(r.samples); i++ {
		minute := r.samples[i].at.Truncate(time.Minute)
		n := r.samples[i].published - r.samples[i-1].published
		if len(out) > 0 && out[len(out)-1].Minute.Equal(minute) {
			out[len(out)-1].Published += n
		} else {
			out = append(out, adminui.RatePoint{Minute: minute, Published: n})
		}
	}
	return out
}

func (r *rateRecorder) stop() {
	close(r.quit)
	<-r.done
}
