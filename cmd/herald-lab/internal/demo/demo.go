// Package demo is `herald-lab demo`: the whole outbox pattern in one command, on
// an embedded default (a SQLite file in a temporary directory and an
// embedded NATS JetStream server), with faults injected on purpose.
//
// An order service places orders, each order row and its order.placed event
// in one transaction; some transactions roll back on purpose. A relay, run
// as a child process, publishes; a consumer reads the stream and
// de-duplicates by event id. Midway the broker is stopped and started again,
// and the relay is killed (SIGKILL) and restarted. The report checks the
// invariants: nothing lost, no ghost from a rolled-back transaction.
package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldadmin"
)

// Config sizes a demo run. Zero fields take the defaults.
type Config struct {
	// Orders is how many orders the service tries to place. Defaults to 3000.
	Orders int
	// Rate is orders per second. Defaults to 150.
	Rate int
	// RollbackPercent is the share of order transactions rolled back on
	// purpose. Defaults to 10.
	RollbackPercent int
	// Outage is how long the broker stays down midway. Defaults to 3s.
	Outage time.Duration
	// Dir holds the SQLite file and the broker's store. Defaults to a new
	// temporary directory, removed at the end.
	Dir string
	// Progress receives a live status line; nil for none.
	Progress io.Writer
	// PlainProgress writes the status as a full line every few seconds
	// instead of rewriting one line in place: for output that is not a
	// terminal (a file, a CI log).
	PlainProgress bool
	// Log receives one line per injected fault; nil for none.
	Log io.Writer
}

func (c *Config) defaults() error {
	if c.Orders == 0 {
		c.Orders = 3000
	}
	if c.Rate == 0 {
		c.Rate = 150
	}
	if c.RollbackPercent == 0 {
		c.RollbackPercent = 10
	}
	if c.Outage == 0 {
		c.Outage = 3 * time.Second
	}
	switch {
	case c.Orders < 10:
		return errors.New("--orders must be at least 10")
	case c.Rate < 1:
		return errors.New("--rate must be positive")
	case c.RollbackPercent < 0 || c.RollbackPercent > 90:
		return errors.New("--rollback-percent must be between 0 and 90")
	case c.Outage < 0:
		return errors.New("--outage must not be negative")
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Report is what a run found.
type Report struct {
	Committed  int           `json:"orders_committed"`
	RolledBack int           `json:"orders_rolled_back"`
	Published  int           `json:"events_published"`
	Received   int           `json:"events_received"`
	Lost       int           `json:"lost"`
	Ghosts     int           `json:"ghosts"`
	Duplicates int           `json:"duplicates_absorbed"`
	P50        time.Duration `json:"latency_p50_ns"`
	P99        time.Duration `json:"latency_p99_ns"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// Outage is how long the broker was stopped on purpose: events
	// committed meanwhile waited for it, and the p99 includes them.
	Outage time.Duration `json:"outage_ns"`
}

// OK reports whether the invariants held.
func (r *Report) OK() bool { return r.Lost == 0 && r.Ghosts == 0 && r.Received == r.Committed }

// Print writes the report for a person.
func (r *Report) Print(w io.Writer) {
	mark := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "FAILED"
	}
	fmt.Fprintf(w, "\nHerald demo report (%s)\n", r.Elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  orders committed         %6d\n", r.Committed)
	fmt.Fprintf(w, "  orders rolled back       %6d  (their events must never appear)\n", r.RolledBack)
	fmt.Fprintf(w, "  events published         %6d\n", r.Published)
	fmt.Fprintf(w, "  events received          %6d\n", r.Received)
	fmt.Fprintf(w, "  lost                     %6d  %s\n", r.Lost, mark(r.Lost == 0))
	fmt.Fprintf(w, "  ghosts                   %6d  %s\n", r.Ghosts, mark(r.Ghosts == 0))
	fmt.Fprintf(w, "  duplicates absorbed      %6d  (by event id, in the consumer)\n", r.Duplicates)
	fmt.Fprintf(w, "  commit-to-receive p50    %9s\n", r.P50.Round(100*time.Microsecond))
	fmt.Fprintf(w, "  commit-to-receive p99    %9s", r.P99.Round(100*time.Microsecond))
	if r.Outage > 0 {
		fmt.Fprintf(w, "  (includes the %s broker outage: events committed during it waited for the broker)", r.Outage)
	}
	fmt.Fprintln(w)
}

const (
	subject    = "orders.placed"
	streamName = "ORDERS"
	// childEnv marks the re-executed process that runs the relay.
	childEnv = "HERALD_DEMO_RELAY"
)

// Run runs the demo and returns its report. An error means the demo could
// not run; a report whose OK is false means an invariant failed.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	start := time.Now()
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "herald-demo-")
		if err != nil {
			return nil, fmt.Errorf("creating a temporary directory: %w", err)
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	dbPath := filepath.Join(cfg.Dir, "shop.db")
	db, err := heraldsqlite.Open(dbPath)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS orders (
		id TEXT PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL)`); err != nil {
		return nil, fmt.Errorf("creating the orders table: %w", err)
	}

	broker, err := startBroker(filepath.Join(cfg.Dir, "nats"))
	if err != nil {
		return nil, err
	}
	defer broker.stop()

	cons, err := startConsumer(ctx, broker.url())
	if err != nil {
		return nil, err
	}
	defer cons.close()

	relay, err := startRelay(dbPath, broker.url())
	if err != nil {
		return nil, err
	}
	defer func() { relay.kill() }()

	shop := &shop{db: db, rollbackPercent: cfg.RollbackPercent, committedAt: map[string]time.Time{}, rolledBack: map[string]bool{}}
	if shop.writer, err = heraldsqlite.NewWriter(nil); err != nil {
		return nil, err
	}

	// Progress and fault injection run beside the order service.
	progressDone := make(chan struct{})
	stopProgress := make(chan struct{})
	go func() {
		defer close(progressDone)
		every := 200 * time.Millisecond
		if cfg.PlainProgress {
			every = 2 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				progress(ctx, cfg, shop, cons, store)
			case <-stopProgress:
				progress(ctx, cfg, shop, cons, store)
				return
			}
		}
	}()
	defer func() {
		select {
		case <-stopProgress:
		default:
			close(stopProgress)
		}
		<-progressDone
	}()

	tick := time.NewTicker(time.Second / time.Duration(cfg.Rate))
	defer tick.Stop()
	for i := 0; i < cfg.Orders; i++ {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if err := shop.placeOrder(ctx, i); err != nil {
			return nil, err
		}
		switch i {
		case cfg.Orders / 3:
			fmt.Fprintf(cfg.Log, "\n-- stopping the broker for %s\n", cfg.Outage)
			broker.stop()
			// The order service keeps writing: its transactions never touch
			// the broker.
			go func() {
				time.Sleep(cfg.Outage)
				if err := broker.start(); err != nil {
					fmt.Fprintf(cfg.Log, "\n-- restarting the broker failed: %v\n", err)
					return
				}
				fmt.Fprintf(cfg.Log, "\n-- broker back\n")
			}()
		case 2 * cfg.Orders / 3:
			fmt.Fprintf(cfg.Log, "\n-- killing the relay (SIGKILL) and starting a new one\n")
			relay.kill()
			if relay, err = startRelay(dbPath, broker.url()); err != nil {
				return nil, err
			}
		}
	}

	// Drain: wait until the consumer has every committed event and every
	// row is acknowledged as published (events the killed relay published
	// but never acknowledged are rescued when its lease expires), or give
	// up after a bound that covers a lease expiry and an outage.
	deadline := time.Now().Add(30*time.Second + cfg.Outage)
	drained := func() bool {
		n := shop.committedCount()
		return cons.distinct() >= n && publishedCount(ctx, store) >= n
	}
	for !drained() && time.Now().Before(deadline) {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	close(stopProgress)
	<-progressDone
	if cfg.Progress != nil {
		fmt.Fprintln(cfg.Progress)
	}
	relay.stop()
	r, err := report(ctx, shop, cons, store, time.Since(start))
	if r != nil {
		r.Outage = cfg.Outage
	}
	return r, err
}

func publishedCount(ctx context.Context, store *heraldsqlite.Driver) int {
	st, err := store.Status(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for _, ts := range st.Topics {
		if ts.State == heraldadmin.StatePublished {
			n += int(ts.Count)
		}
	}
	return n
}

func progress(ctx context.Context, cfg Config, s *shop, c *consumer, store *heraldsqlite.Driver) {
	w := cfg.Progress
	if w == nil {
		return
	}
	st, err := store.Status(ctx)
	if err != nil {
		return
	}
	var published, backlog int64
	for _, ts := range st.Topics {
		switch ts.State {
		case heraldadmin.StatePublished:
			published += ts.Count
		case heraldadmin.StateReady, heraldadmin.StateClaimed:
			backlog += ts.Count
		}
	}
	start, end := "\r", " "
	if cfg.PlainProgress {
		start, end = "", "\n"
	}
	fmt.Fprintf(w, "%scommitted %6d   published %6d   received %6d   backlog %5d%s", start, s.committedCount(), published, c.distinct(), backlog, end)
}

func report(ctx context.Context, s *shop, c *consumer, store *heraldsqlite.Driver, elapsed time.Duration) (*Report, error) {
	st, err := store.Status(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Elapsed: elapsed}
	for _, ts := range st.Topics {
		if ts.State == heraldadmin.StatePublished {
			r.Published += int(ts.Count)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	r.Committed, r.RolledBack = len(s.committedAt), len(s.rolledBack)
	r.Duplicates = c.duplicates
	var lat []time.Duration
	for id, at := range c.receivedAt {
		if s.rolledBack[id] {
			r.Ghosts++
			continue
		}
		if committed, ok := s.committedAt[id]; ok {
			r.Received++
			lat = append(lat, at.Sub(committed))
		}
	}
	for id := range s.committedAt {
		if _, ok := c.receivedAt[id]; !ok {
			r.Lost++
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		r.P50 = lat[len(lat)*50/100]
		r.P99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return r, nil
}

// shop is the order service: business rows and events in one transaction.
type shop struct {
	db              *sql.DB
	writer          *herald.Writer[*sql.Tx]
	rollbackPercent int

	mu          sync.Mutex
	committedAt map[string]time.Time
	rolledBack  map[string]bool
}

func (s *shop) committedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.committedAt)
}

// placeOrder writes an order and its event in one transaction. Some
// transactions fail on purpose after the event was written, in the ways a
// real service fails: an explicit rollback, or a constraint violation.
func (s *shop) placeOrder(ctx context.Context, n int) error {
	orderID := fmt.Sprintf("order-%06d", n)
	eventID := herald.NewID()
	doomed := rand.IntN(100) < s.rollbackPercent

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("placing %s: %w", orderID, err)
	}
	defer tx.Rollback()
	total := 500 + rand.IntN(20000)
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES (?, ?, ?)`,
		orderID, fmt.Sprintf("customer-%d", rand.IntN(100)), total); err != nil {
		return fmt.Errorf("placing %s: %w", orderID, err)
	}
	err = s.writer.WriteTx(ctx, tx, herald.Message{
		ID:            eventID,
		Topic:         subject,
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   orderID,
		Payload:       fmt.Appendf(nil, `{"order_id":%q,"total_cents":%d}`, orderID, total),
	})
	if err != nil {
		return fmt.Errorf("placing %s: %w", orderID, err)
	}
	if doomed {
		if n%2 == 0 {
			// A second insert of the same order: the constraint fails and
			// the service rolls back, as it would on any error.
			_, err = tx.ExecContext(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES (?, 'x', 1)`, orderID)
			if err == nil {
				return fmt.Errorf("placing %s: the duplicate order was accepted", orderID)
			}
		}
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("rolling back %s: %w", orderID, err)
		}
		s.mu.Lock()
		s.rolledBack[eventID] = true
		s.mu.Unlock()
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing %s: %w", orderID, err)
	}
	s.mu.Lock()
	s.committedAt[eventID] = time.Now()
	s.mu.Unlock()
	return nil
}

// broker is an embedded JetStream server that can be stopped and started
// again on the same port and store, as a broker restart does.
type broker struct {
	mu   sync.Mutex
	opts *server.Options
	srv  *server.Server
}

func startBroker(storeDir string) (*broker, error) {
	b := &broker{opts: &server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoLog: true, NoSigs: true,
	}}
	if err := b.start(); err != nil {
		return nil, err
	}
	b.opts.Port = b.srv.Addr().(*net.TCPAddr).Port
	nc, err := nats.Connect(b.url())
	if err != nil {
		b.stop()
		return nil, fmt.Errorf("connecting to the embedded broker: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.stop()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: streamName, Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		b.stop()
		return nil, fmt.Errorf("creating the demo stream: %w", err)
	}
	return b, nil
}

func (b *broker) start() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	srv, err := server.NewServer(b.opts)
	if err != nil {
		return fmt.Errorf("starting the embedded broker: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		return errors.New("the embedded broker did not start within 10s")
	}
	b.srv = srv
	return nil
}

func (b *broker) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
		b.srv = nil
	}
}

func (b *broker) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", b.opts.Port) }

// consumer reads the stream and de-duplicates by event id, as a consumer of
// an at-least-once outbox must.
type consumer struct {
	nc         *nats.Conn
	cc         jetstream.ConsumeContext
	mu         sync.Mutex
	receivedAt map[string]time.Time
	duplicates int
}

func startConsumer(ctx context.Context, url string) (*consumer, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.Name("herald-demo-consumer"))
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	stream, err := js.Stream(ctx, streamName)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	oc, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &consumer{nc: nc, receivedAt: map[string]time.Time{}}
	c.cc, err = oc.Consume(func(m jetstream.Msg) {
		id := m.Headers().Get(herald.HeaderID)
		now := time.Now()
		c.mu.Lock()
		if _, seen := c.receivedAt[id]; seen {
			c.duplicates++
		} else {
			c.receivedAt[id] = now
		}
		c.mu.Unlock()
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return c, nil
}

func (c *consumer) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.receivedAt)
}

func (c *consumer) close() {
	c.cc.Stop()
	c.nc.Close()
}

// relayProcess is the relay, run as a child process so that it can be
// killed for real: its claimed rows then wait for their lease to expire and
// are rescued by the next relay.
type relayProcess struct{ cmd *exec.Cmd }

func startRelay(dbPath, natsURL string) (*relayProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to run the relay: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"=1", "HERALD_DEMO_DB="+dbPath, "HERALD_DEMO_NATS="+natsURL)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	cmd.SysProcAttr = childProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the relay process: %w", err)
	}
	return &relayProcess{cmd: cmd}, nil
}

func (r *relayProcess) kill() {
	if r == nil || r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// stop asks the relay to shut down gracefully and waits for it.
func (r *relayProcess) stop() {
	if r.cmd.ProcessState != nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
}
