package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldcdc"
	"github.com/herald-outbox/herald/driver/heraldcdc/heraldcdcprom"
	"github.com/herald-outbox/herald/heraldprom"
	"github.com/herald-outbox/herald/heraldspec"
)

// One relay process, several databases: each database is relayed by a
// herald.Relay of its own (its store, claims, leases, counters), and every
// relay publishes through the process's one set of destinations, connected
// once. What the relays share is split so that one database's backlog
// cannot take another's part of it:
//
//   - --max-in-flight-bytes is the process's memory bound: each database's
//     relay gets an equal share of it (a backlog's batches shrink to its
//     share, never into another's);
//   - publish slots: each relay publishes at most --max-in-flight batches
//     at once, and a routed destination takes --max-in-flight calls per
//     database (plan.slots), so a backlog can never fill the slots another
//     database's batch needs; a destination's own bound on what awaits the
//     broker (NATS's --nats-max-pending) is shared and only delays a batch
//     by that window's round trip.
//
// Each database starts, waits for its server, fails and is stopped or
// started by an operator on its own (dbRelay); the destinations are waited
// for once, by the fleet.

// databaseName is the rule for a database's NAME in --db NAME=DSN and
// --databases, the same as a destination's.
var databaseName = destinationName

// defaultDatabase names the database of a plain --db DSN.
const defaultDatabase = "default"

// splitNamedDSN reads NAME=DSN: NAME a database name, DSN a URL, a sqlite:
// path or a keyword/value string (heraldspec.IsDSN). Anything else is one
// plain DSN: host=... must never read as a database named host.
func splitNamedDSN(raw string) (name, dsn string, named bool) {
	name, dsn, found := strings.Cut(raw, "=")
	if found && databaseName.MatchString(name) && !heraldspec.DSNKeyword(name) && heraldspec.IsDSN(dsn) {
		return name, dsn, true
	}
	return "", raw, false
}

// dbSource is one database as the user gave it, not yet parsed.
type dbSource struct {
	name, raw string
	label     string // where it came from, for errors: --db orders, HERALD_DB_ORDERS
}

// databaseEnv is the variable that holds a --databases NAME's DSN.
func databaseEnv(name string) string {
	return "HERALD_DB_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// databaseSources collects the databases of --db (each DSN or NAME=DSN)
// and --databases (names whose DSNs are in HERALD_DB_<NAME> or its _FILE
// twin). named reports whether the databases have names of the user's:
// then every log line and metric of a database carries it.
func databaseSources(inv *invocation, given []string, names string) (srcs []dbSource, named bool, err error) {
	seen := map[string]string{} // name -> label
	add := func(s dbSource) error {
		if prev, dup := seen[s.name]; dup {
			return usagef("%s: database %q is also given by %s: each name once", s.label, s.name, prev)
		}
		seen[s.name] = s.label
		srcs = append(srcs, s)
		return nil
	}
	label := inv.flags.label("db")
	for _, raw := range given {
		if strings.TrimSpace(raw) == "" {
			continue
		}
		name, dsn, ok := splitNamedDSN(strings.TrimSpace(raw))
		s := dbSource{name: defaultDatabase, raw: dsn, label: label}
		if ok {
			s, named = dbSource{name: name, raw: dsn, label: label + " " + name}, true
		}
		if err := add(s); err != nil {
			return nil, false, err
		}
	}
	if strings.TrimSpace(names) != "" {
		named = true
		listLabel := inv.flags.label("databases")
		for _, name := range strings.Split(names, ",") {
			name = strings.TrimSpace(name)
			switch {
			case !databaseName.MatchString(name):
				return nil, false, usagef("%s: name %q must match %s", listLabel, clean(name), databaseName)
			case name == "file" || strings.HasSuffix(name, "_file") || strings.HasSuffix(name, "-file"):
				return nil, false, usagef("%s: name %q would read as a _FILE variable; choose another", listLabel, name)
			}
			env := databaseEnv(name)
			dsn, ok, err := lookupEnv(inv.getenv, env)
			if err != nil {
				return nil, false, err
			}
			if !ok || strings.TrimSpace(dsn) == "" {
				return nil, false, usagef("%s names %s, but %s (or %s_FILE) is not set: it holds that database's DSN",
					listLabel, name, env, env)
			}
			if err := add(dbSource{name: name, raw: strings.TrimSpace(dsn), label: env}); err != nil {
				return nil, false, err
			}
		}
	}
	if len(srcs) == 0 {
		return nil, false, usagef("--db (or HERALD_DB) is required: a postgres://user:password@host:5432/db DSN; " +
			"several as --db NAME=DSN, or --databases NAMES with HERALD_DB_<NAME>")
	}
	return srcs, named || len(srcs) > 1, nil
}

// parseDatabase checks one database's DSN as parseDB checks --db, with its
// errors naming where the DSN came from.
func (d *dbFlags) parseDatabase(inv *invocation, src dbSource) (*database, error) {
	prev, had := inv.flags.source["db"]
	inv.flags.source["db"] = src.label
	defer func() {
		if had {
			inv.flags.source["db"] = prev
		} else {
			delete(inv.flags.source, "db")
		}
	}()
	one := *d
	raw := src.raw
	one.db = &raw
	return one.parseDB(inv, false)
}

// repeatable makes the string flag name collect every value it is given,
// in order, as well as keeping the last one where it did.
func repeatable(f *flagSet, name string) *[]string {
	fl := f.fs.Lookup(name)
	orig := fl.Value
	list := new([]string)
	fl.Value = funcValue{f: f, set: func(s string) error {
		*list = append(*list, s)
		return orig.Set(s)
	}, str: orig.String}
	return list
}

// shareOf is one database's part of the process's --max-in-flight-bytes:
// an equal share, so that a backlog in one cannot hold the memory the
// others need. A negative bound (none) stays none.
func shareOf(total int64, databases int) int64 {
	if total <= 0 || databases <= 1 {
		return total
	}
	return max(total/int64(databases), 1)
}

// dbState is where a database's relaying is.
type dbState string

const (
	dbStarting dbState = "starting" // waiting for its database (or the destinations)
	dbRunning  dbState = "running"
	dbStopped  dbState = "stopped" // by an operator, or at shutdown
	dbFailed   dbState = "failed"  // its database refused the configuration
)

// dbRelay is one database's relaying: its pool, store and relay, started
// and stopped on its own.
type dbRelay struct {
	name    string
	db      *database
	log     *slog.Logger
	pool    *heraldspec.Outbox
	store   outbox
	cfg     herald.RelayConfig // Store, Publisher and Owner are set at each start
	metrics *heraldprom.Metrics

	mu      sync.Mutex
	state   dbState
	waitFor string // what the start waits for: "database" or "destinations"
	waitErr string
	failErr string
	relay   *herald.Relay
	source  io.Closer // the relay's change stream, with --source cdc
	// skippedBefore is what the change streams of earlier runs skipped
	// (SkippedMessages), so that the counter never goes back.
	skippedBefore int64
	cancel        context.CancelFunc // ends the current start
	started       chan struct{}      // closed when the current start has ended
	previous      herald.RelayStats  // the counters of the relays stopped before
	ran           bool               // a relay of it ran
}

// waiting records what the start waits for; it implements waiter.
func (d *dbRelay) waiting(what, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waitFor, d.waitErr = what, why
}

// stats is the database's counters over every start.
func (d *dbRelay) stats() herald.RelayStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.previous
	if d.relay != nil {
		s = addStats(s, d.relay.Stats())
	}
	return s
}

func addStats(a, b herald.RelayStats) herald.RelayStats {
	return herald.RelayStats{Claimed: a.Claimed + b.Claimed, Published: a.Published + b.Published,
		Retried: a.Retried + b.Retried, HeldBack: a.HeldBack + b.HeldBack, Dead: a.Dead + b.Dead,
		Released: a.Released + b.Released, Rescued: a.Rescued + b.Rescued, Deleted: a.Deleted + b.Deleted,
		Streamed: a.Streamed + b.Streamed}
}

// fleet runs the relays of every database over one set of destinations.
type fleet struct {
	inv    *invocation
	log    *slog.Logger
	dbs    []*dbRelay
	named  bool
	status *relayStatus
	owner  string
	cdc    *cdcSetup // --source cdc; nil when polling

	// ctx ends at shutdown; every start runs under it.
	ctx context.Context
	// reached is closed once a database answered: the destinations are
	// opened then, so that a relay whose databases refuse it ends on that
	// alone, as with one database.
	reached     chan struct{}
	reachedOnce sync.Once
	// connected is closed once the destinations are open (status.dests).
	connected chan struct{}
	// fatal receives what ends the process: the destinations refused, or
	// the only database refused.
	fatal chan error
	wg    sync.WaitGroup
}

func (f *fleet) byName(name string) *dbRelay {
	for _, d := range f.dbs {
		if d.name == name {
			return d
		}
	}
	return nil
}

// fail ends the process with err; the first error wins.
func (f *fleet) fail(err error) {
	select {
	case f.fatal <- err:
	default:
	}
}

// errAlready is the answer to starting a database that is not stopped.
var errAlready = errors.New("already started")

// start starts relaying d: it waits for its database, then for the
// destinations, then starts its relay; each wait as long as it takes.
func (f *fleet) start(d *dbRelay) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.state == dbStarting || d.state == dbRunning {
		return errAlready
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	d.state, d.cancel, d.started, d.failErr, d.waitFor, d.waitErr = dbStarting, cancel, done, "", "database", ""
	f.wg.Go(func() {
		defer close(done)
		err := f.run(ctx, d)
		if err == nil || errors.Is(err, errStoppedStarting) {
			return
		}
		msg := f.inv.stderr.scrub(err.Error())
		d.mu.Lock()
		d.state, d.failErr, d.waitFor, d.waitErr = dbFailed, msg, "", ""
		d.mu.Unlock()
		if len(f.dbs) == 1 {
			f.fail(err)
			return
		}
		d.log.Error("the database refused: not relaying it; the others go on (POST /databases/"+d.name+"/start tries again)",
			"error", msg)
	})
	return nil
}

// run is one start of d. It returns nil once the relay runs, and
// errStoppedStarting when the start was cancelled first.
func (f *fleet) run(ctx context.Context, d *dbRelay) error {
	start := starter{inv: f.inv, log: d.log, status: d}
	err := start.wait(ctx, "database", func(ctx context.Context) error {
		if err := d.pool.Reach(ctx); err != nil {
			return err
		}
		return d.store.Ping(ctx)
	})
	if err != nil {
		return err
	}
	f.reachedOnce.Do(func() { close(f.reached) })
	d.waiting("destinations", "")
	select {
	case <-f.connected:
	case <-ctx.Done():
		return errStoppedStarting
	}
	cfg := d.cfg
	cfg.Store, cfg.Publisher, cfg.Owner = d.store, f.status.publisher(), f.owner
	// Pausing a destination holds every topic routed to it.
	cfg.DestinationOf = f.status.destinationOf
	var source io.Closer
	if f.cdc != nil {
		src, err := f.cdc.open(ctx, d)
		if err != nil {
			return err
		}
		cfg.Source, source = src, src
	}
	// Without a source, Start refuses a table whose inserts are streamed
	// (herald.StreamSwitch): the daemon's polling relays get the library's
	// rule as every service does.
	closeSource := func() {
		if source != nil {
			_ = source.Close()
		}
	}
	relay, err := herald.NewRelay(&cfg)
	if err != nil {
		closeSource()
		return usagef("%s", err)
	}
	// Start checks the database again: it may have gone in between.
	if err := start.wait(ctx, "database", relay.Start); err != nil {
		closeSource()
		return err
	}
	d.mu.Lock()
	if ctx.Err() != nil {
		// Stopped while the relay started: stop lets it finish.
		d.mu.Unlock()
		_ = relay.Stop(context.Background())
		closeSource()
		return errStoppedStarting
	}
	d.state, d.relay, d.source, d.waitFor, d.waitErr, d.ran = dbRunning, relay, source, "", "", true
	d.mu.Unlock()
	if d.metrics != nil {
		d.metrics.Watch(relay)
	}
	args := []any{"table", d.store.Table(), "destinations", f.status.plan.display()}
	if f.named {
		args = append(args, "at", d.db.where)
	} else {
		args = append(args, "database", d.db.where)
	}
	d.log.Info("relaying", args...)
	return nil
}

// stop stops relaying d: a start is cancelled, a running relay drains its
// in-flight batches until ctx ends.
func (f *fleet) stop(ctx context.Context, d *dbRelay) error {
	d.mu.Lock()
	cancel, started := d.cancel, d.started
	if d.state == dbStopped {
		d.mu.Unlock()
		return nil
	}
	if cancel != nil {
		cancel()
	}
	d.mu.Unlock()
	if started != nil {
		<-started
	}
	// The relay and its source are read once the start has ended: a start
	// that ran meanwhile set them.
	d.mu.Lock()
	relay, source := d.relay, d.source
	d.mu.Unlock()
	var err error
	if relay != nil {
		err = relay.Stop(ctx)
	}
	if source != nil {
		// After the relay: its last batch is done, and confirmed.
		_ = source.Close()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if relay != nil && d.relay == relay {
		if sk, ok := d.source.(heraldcdcprom.Skipper); ok {
			d.skippedBefore += sk.SkippedMessages()
		}
		d.previous, d.relay, d.source = addStats(d.previous, relay.Stats()), nil, nil
	}
	d.state = dbStopped
	d.waitFor, d.waitErr = "", ""
	return err
}

// connect opens the destinations once, for every database, and tells the
// waiting starts; a refused destination ends the process.
func (f *fleet) connect(open func(context.Context) (*destinations, error)) {
	f.wg.Go(func() {
		select {
		case <-f.reached:
		case <-f.ctx.Done():
			return
		}
		dests, err := open(f.ctx)
		if err != nil {
			if !errors.Is(err, errStoppedStarting) {
				f.fail(err)
			}
			return
		}
		f.status.connected(dests)
		close(f.connected)
	})
}

// stopAll stops every database at once, each draining until ctx ends.
func (f *fleet) stopAll(ctx context.Context) error {
	errs := make([]error, len(f.dbs))
	var wg sync.WaitGroup
	for i, d := range f.dbs {
		wg.Go(func() {
			if err := f.stop(ctx, d); err != nil {
				errs[i] = fmt.Errorf("database %s: %w", d.name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// summary is what the relay prints when it stops: the totals, then, with
// named databases, each one's.
func (f *fleet) summary() string {
	var total herald.RelayStats
	var lines []string
	for _, d := range f.dbs {
		s := d.stats()
		total = addStats(total, s)
		lines = append(lines, fmt.Sprintf("database %s: %d published, %d retried, %d dead, %d released\n",
			d.name, s.Published, s.Retried, s.Dead, s.Released))
	}
	out := fmt.Sprintf("relay stopped: %d published, %d retried, %d dead, %d released\n",
		total.Published, total.Retried, total.Dead, total.Released)
	if f.named {
		out += strings.Join(lines, "")
	}
	return out
}

// ownerName is the relays' owner: host and process.
func ownerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// stopTimeout bounds an operator's stop of one database.
var stopTimeout = 30 * time.Second

// databasesJSON is the documented shape of GET /databases and of the
// answer to POST /databases/{name}/stop and /start.
type databasesJSON struct {
	Databases []databaseJSON `json:"databases"`
}

// handle serves /databases: GET lists each database's state; POST
// /databases/{name}/stop and /start stop and start relaying one database
// without touching the others, for a caller that presents the admin token
// as "Authorization: Bearer TOKEN". Without a token configured, both are
// refused.
func (f *fleet) handle(mux *http.ServeMux, token string, audit *slog.Logger) {
	list := func(w http.ResponseWriter, code int) {
		out := databasesJSON{Databases: []databaseJSON{}}
		connected := f.status.getDests() != nil
		for _, d := range f.dbs {
			out.Databases = append(out.Databases, d.ready(connected))
		}
		for i := range out.Databases {
			out.Databases[i].Database = f.inv.stderr.scrub(out.Databases[i].Database)
			out.Databases[i].Destination = f.inv.stderr.scrub(out.Databases[i].Destination)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(out)
	}
	mux.HandleFunc("GET /databases", func(w http.ResponseWriter, _ *http.Request) { list(w, http.StatusOK) })
	act := func(action string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !bearerMatches(r, token) {
				if token == "" {
					http.Error(w, "actions are off: set "+adminTokenEnv, http.StatusForbidden)
					return
				}
				audit.Warn("database "+action+" refused: wrong or missing token", "remote", r.RemoteAddr)
				w.Header().Set("WWW-Authenticate", `Bearer realm="herald"`)
				http.Error(w, "needs Authorization: Bearer with "+adminTokenEnv, http.StatusUnauthorized)
				return
			}
			d := f.byName(r.PathValue("name"))
			if d == nil {
				http.Error(w, "no such database", http.StatusNotFound)
				return
			}
			var err error
			switch action {
			case "stop":
				ctx, cancel := context.WithTimeout(r.Context(), stopTimeout)
				err = f.stop(ctx, d)
				cancel()
			case "start":
				if err = f.start(d); errors.Is(err, errAlready) {
					err = nil
				}
			}
			if err != nil {
				d.log.Error("database "+action+" failed", "error", f.inv.stderr.scrub(err.Error()))
				http.Error(w, f.inv.stderr.scrub(err.Error()), http.StatusInternalServerError)
				return
			}
			audit.Info("database "+map[string]string{"stop": "stopped", "start": "started"}[action]+" by an operator",
				"database", d.name, "remote", r.RemoteAddr)
			list(w, http.StatusOK)
		}
	}
	mux.HandleFunc("POST /databases/{name}/stop", act("stop"))
	mux.HandleFunc("POST /databases/{name}/start", act("start"))
}

// bearerMatches reports whether r presents token as a bearer token,
// compared in constant time; never with no token configured.
func bearerMatches(r *http.Request, token string) bool {
	scheme, presented, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if token == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(presented))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// anyRan reports whether a database's relay ran at all.
func (f *fleet) anyRan() bool {
	for _, d := range f.dbs {
		d.mu.Lock()
		ran := d.ran
		d.mu.Unlock()
		if ran {
			return true
		}
	}
	return false
}

// labelledMetrics gathers every database's metrics for one /metrics, each
// relay and backlog series labelled database=NAME. What belongs to the
// process (the destinations' breakers and call times, the build, the Go
// runtime and the process) is the first database's, unlabelled, once.
type labelledMetrics struct{ dbs []*dbRelay }

// processWide reports whether a metric family belongs to the process.
func processWide(name string) bool {
	return strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") ||
		strings.HasPrefix(name, "herald_destination_") || name == "herald_build_info"
}

// Gather implements prometheus.Gatherer.
func (m labelledMetrics) Gather() ([]*dto.MetricFamily, error) {
	byName := map[string]*dto.MetricFamily{}
	var errs []error
	for i, d := range m.dbs {
		families, err := d.metrics.Registry().Gather()
		if err != nil {
			errs = append(errs, err)
		}
		for _, mf := range families {
			shared := processWide(mf.GetName())
			if shared && i > 0 {
				continue
			}
			if !shared {
				for _, metric := range mf.Metric {
					name, value := "database", d.name
					metric.Label = append(metric.Label, &dto.LabelPair{Name: &name, Value: &value})
					slices.SortFunc(metric.Label, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
				}
			}
			if have := byName[mf.GetName()]; have != nil {
				have.Metric = append(have.Metric, mf.Metric...)
			} else {
				byName[mf.GetName()] = mf
			}
		}
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, byName[name])
	}
	return out, errors.Join(errs...)
}

// OldestUnconfirmed is the commit time of the oldest transaction the
// database's change stream handed out and has not confirmed, for
// herald_cdc_slot_lag_seconds; false without one, or while it has none.
func (d *dbRelay) OldestUnconfirmed() (time.Time, bool) {
	d.mu.Lock()
	src, ok := d.source.(heraldcdcprom.Unconfirmed)
	d.mu.Unlock()
	if !ok {
		return time.Time{}, false
	}
	return src.OldestUnconfirmed()
}

// SkippedMessages counts the event messages the relay's change streams
// skipped as no event, over every run of this process.
func (d *dbRelay) SkippedMessages() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.skippedBefore
	if sk, ok := d.source.(heraldcdcprom.Skipper); ok {
		n += sk.SkippedMessages()
	}
	return n
}

// slotReader is a change stream that knows whether it holds its slot
// (*heraldcdc.Source).
type slotReader interface{ Active() bool }

// readerActive reports whether the database's change stream holds its
// slot now (heraldcdc.Source.Active): false while another relay streams
// it and this one stands by, while it reconnects, and without a relay
// running.
func (d *dbRelay) readerActive() bool {
	d.mu.Lock()
	src, ok := d.source.(slotReader)
	d.mu.Unlock()
	return ok && src.Active()
}

// registerSlotMetrics adds the change stream's slot to d's metrics, and
// herald_cdc_reader_active: whether this process streams the slot (1) or
// stands by (0). The slot's herald_cdc_slot_active says that some reader
// streams it; this gauge says which relay does.
func registerSlotMetrics(d *dbRelay, c *cdcSetup) error {
	q, ok := d.pool.Client.(heraldcdc.Querier)
	if !ok {
		return errors.New("--source cdc needs PostgreSQL")
	}
	slot := c.slot
	if slot == "" {
		slot = d.db.names.Table
	}
	col, err := heraldcdcprom.New(heraldcdcprom.Config{Querier: q, Slot: slot, Stream: d, Skipped: d, Logger: d.log})
	if err != nil {
		return err
	}
	if err := d.metrics.Registry().Register(col); err != nil {
		return err
	}
	return d.metrics.Registry().Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "herald_cdc_reader_active",
		Help:        "1 while this relay streams the change-data-capture slot, 0 while it stands by for another reader (or reconnects).",
		ConstLabels: prometheus.Labels{"slot": slot},
	}, func() float64 {
		if d.readerActive() {
			return 1
		}
		return 0
	}))
}
