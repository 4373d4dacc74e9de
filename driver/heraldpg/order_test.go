package heraldpg_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/driver/heraldpg"
	"github.com/herald-outbox/herald/internal/testenv"
)

// The tests in this file run relays as separate processes (this test binary,
// re-executed) so that they can be killed and paused for real. The broker
// they publish to is a table, broker_log, in the test's schema: its serial
// column is the order in which deliveries reached the "broker", across all
// processes, and a duplicate delivery is a second row. The same guarantees
// with relays in one process run on every driver in heralddrivertest
// (SeveralOrderedRelaysKeepEveryKeysOrderUnderFailures and the cases beside
// it).

const (
	childEnv       = "HERALD_ORDER_CHILD" // the child relay's name
	childDSNEnv    = "HERALD_ORDER_DSN"
	childSchemaEnv = "HERALD_ORDER_SCHEMA"
	childFailEnv   = "HERALD_ORDER_FAIL" // share of events that fail, 0 to 1
)

// Child relay timings: a short lease so that a paused relay loses it soon.
const (
	childWorkers   = 8
	childBatch     = 50
	childPerKey    = 10
	childLease     = 2 * time.Second
	childPubTimout = time.Second
)

// runOrderChildIfAsked runs a child relay until SIGTERM, then exits the
// process, when this process was started as one.
func runOrderChildIfAsked() {
	name := os.Getenv(childEnv)
	if name == "" {
		return
	}
	if err := runOrderChild(name); err != nil {
		fmt.Fprintln(os.Stderr, "order child:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runOrderChild(name string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	failRate, err := strconv.ParseFloat(os.Getenv(childFailEnv), 64)
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(os.Getenv(childDSNEnv))
	if err != nil {
		return err
	}
	// The test finds this relay's sessions in pg_stat_activity by name.
	pcfg.ConnConfig.RuntimeParams["application_name"] = name
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	cfg := &heraldpg.Config{Schema: os.Getenv(childSchemaEnv)}
	store, err := heraldpg.New(pool, cfg)
	if err != nil {
		return err
	}
	pub := &logPublisher{pool: pool, table: `"` + cfg.Schema + `".broker_log`, relay: name, failRate: failRate}
	relay, err := herald.NewRelay(&herald.RelayConfig{
		Store: store, Publisher: pub, Owner: name,
		Logger:           slogToStderr(),
		BatchSize:        childBatch,
		MaxInFlight:      childWorkers,
		MaxPerKey:        childPerKey,
		Lease:            childLease,
		PublishTimeout:   childPubTimout,
		PollInterval:     2 * time.Millisecond,
		IdlePollInterval: 20 * time.Millisecond,
		RescueInterval:   100 * time.Millisecond,
		OutageBackoffCap: 50 * time.Millisecond,
		Retry:            herald.RetryPolicy{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, MaxAttempts: 1000, MaxAge: time.Hour},
	})
	if err != nil {
		return err
	}
	if err := relay.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return relay.Stop(stopCtx)
}

// logPublisher delivers to broker_log, one INSERT per batch in batch order.
// It fails a share of the events at random, and honours the Publisher
// contract: after a failed event, the later events of its key in the batch
// are held back, not delivered.
type logPublisher struct {
	pool     *pgxpool.Pool
	table    string
	relay    string
	failRate float64
	poison   func(herald.Envelope) bool // events that fail permanently
}

func (p *logPublisher) Publish(ctx context.Context, batch []herald.Envelope) error {
	errs := make([]error, len(batch))
	failed := map[string]bool{}
	var ids, keys []string
	anyFailed := false
	for i, env := range batch {
		k := env.Topic + "\x00" + env.Key
		switch {
		case failed[k]:
			errs[i] = herald.ErrHeldBack
		case p.poison != nil && p.poison(env):
			errs[i] = herald.Permanent(errors.New("poison event"))
		case rand.Float64() < p.failRate:
			errs[i] = errors.New("injected broker failure")
		default:
			ids, keys = append(ids, env.ID), append(keys, env.Key)
			continue
		}
		failed[k], anyFailed = true, true
	}
	if len(ids) > 0 {
		_, err := p.pool.Exec(ctx, `INSERT INTO `+p.table+` (event_id, key, relay)
			SELECT u.id, u.key, $3 FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY AS u(id, key, n) ORDER BY u.n`,
			ids, keys, p.relay)
		if err != nil {
			return err
		}
	}
	if anyFailed {
		return &herald.BatchError{Errs: errs}
	}
	return nil
}

func createBrokerLog(t *testing.T, b *bundle) string {
	t.Helper()
	table := `"` + b.Config.Schema + `".broker_log`
	_, err := b.Pool.Exec(context.Background(), `CREATE TABLE `+table+` (
		n bigserial PRIMARY KEY, event_id uuid NOT NULL, key text NOT NULL, relay text NOT NULL)`)
	require.NoError(t, err)
	return table
}

// child is a relay process.
type child struct {
	name string
	cmd  *exec.Cmd
	log  *testenv.LogBuffer
}

func startChild(t *testing.T, b *bundle, name string, failRate float64) *child {
	t.Helper()
	c := &child{name: name, log: &testenv.LogBuffer{}}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		childEnv+"="+name,
		childDSNEnv+"="+testenv.PostgresDSN(t),
		childSchemaEnv+"="+b.Config.Schema,
		childFailEnv+"="+strconv.FormatFloat(failRate, 'f', -1, 64))
	c.cmd.Stderr = c.log
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	return c
}

// stop asks the child to stop gracefully and waits for it.
func (c *child) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, c.cmd.Wait(), "relay %s did not stop cleanly; its log:\n%s", c.name, c.log)
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	_ = c.cmd.Wait()
}

// writeKeyed commits events of nKeys keys, total in all, from writers
// goroutines: each key belongs to one writer, which commits its
// transactions one after the other, so a key's commit order is its
// sequence order while different keys' transactions interleave.
func writeKeyed(t *testing.T, b *bundle, nKeys, total, writers, perTx int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			ctx := context.Background()
			n := total / writers
			for n > 0 {
				msgs := make([]herald.Message, min(perTx, n))
				for i := range msgs {
					k := w + writers*rand.IntN(nKeys/writers)
					msgs[i] = herald.Message{Topic: "orders", Key: fmt.Sprintf("k%03d", k), Payload: []byte(`{}`)}
				}
				err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error { return b.Writer.WriteTx(ctx, tx, msgs...) })
				if err != nil {
					errs <- err
					return
				}
				n -= len(msgs)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// delivery is one row of broker_log.
type delivery struct {
	id, key, relay string
	seq            int64 // the event's outbox seq
}

// deliveries reads broker_log in delivery order, with each event's seq.
func deliveries(t *testing.T, b *bundle, log string) []delivery {
	t.Helper()
	rows, err := b.Pool.Query(context.Background(), `SELECT l.event_id::text, l.key, l.relay, o.seq
		FROM `+log+` l JOIN `+b.Store.Table()+` o ON o.id = l.event_id ORDER BY l.n`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (delivery, error) {
		var d delivery
		return d, r.Scan(&d.id, &d.key, &d.relay, &d.seq)
	})
	require.NoError(t, err)
	return out
}

// requireKeyOrder checks that, per key, the first delivery of each event
// comes in sequence order, and returns the duplicate deliveries.
func requireKeyOrder(t *testing.T, ds []delivery) (duplicates []delivery) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, d := range ds {
		if seen[d.id] {
			duplicates = append(duplicates, d)
			continue
		}
		seen[d.id] = true
		require.Greaterf(t, d.seq, last[d.key], "key %s: event seq %d delivered after seq %d", d.key, d.seq, last[d.key])
		last[d.key] = d.seq
	}
	return duplicates
}

// waitDrained waits until every one of total events was delivered and no
// row is ready or claimed.
func waitDrained(t *testing.T, b *bundle, log string, total int, children ...*child) {
	t.Helper()
	ctx := context.Background()
	require.Eventuallyf(t, func() bool {
		var distinct, pending int
		if b.Pool.QueryRow(ctx, `SELECT count(DISTINCT event_id) FROM `+log).Scan(&distinct) != nil {
			return false
		}
		if b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+b.Store.Table()+` WHERE state IN ('ready', 'claimed')`).Scan(&pending) != nil {
			return false
		}
		return distinct == total && pending == 0
	}, 3*time.Minute, 20*time.Millisecond, "not drained; relay logs:\n%s", childLogs(children))
}

func childLogs(children []*child) string {
	var sb strings.Builder
	for _, c := range children {
		fmt.Fprintf(&sb, "--- %s\n%s", c.name, c.log)
	}
	return sb.String()
}

func TestOrderedRelayProcessesKeepEveryKeysOrderUnderFailures(t *testing.T) {
	testenv.Long(t)
	const keys, events = 200, 20000
	b := setup(t)
	log := createBrokerLog(t, b)
	var children []*child
	for i := range 3 {
		children = append(children, startChild(t, b, fmt.Sprintf("relay-%d", i), 0.10))
	}
	writeKeyed(t, b, keys, events, 4, 50)
	waitDrained(t, b, log, events, children...)
	for _, c := range children {
		c.stop(t)
	}

	ds := deliveries(t, b, log)
	dups := requireKeyOrder(t, ds)
	require.Empty(t, dups, "no crash, so no duplicate")
	require.Len(t, ds, events)
	perRelay := map[string]int{}
	for _, d := range ds {
		perRelay[d.relay]++
	}
	require.Len(t, perRelay, 3, "every relay published a share: %v", perRelay)
	var retried int
	require.NoError(t, b.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+b.Store.Table()+` WHERE attempts > 1`).Scan(&retried))
	require.Greater(t, retried, events/20, "about a tenth of the events failed at least once")
	require.Zero(t, b.count(t, `state <> 'published'`), "nothing dead, nothing left")
	t.Logf("deliveries per relay: %v; events retried: %d", perRelay, retried)
}

func TestOrderedRelayProcessesSurviveKillAndPause(t *testing.T) {
	testenv.Long(t)
	const keys, events = 200, 20000
	b := setup(t)
	log := createBrokerLog(t, b)
	a := startChild(t, b, "relay-a", 0.05)
	p := startChild(t, b, "relay-p", 0.05)
	c := startChild(t, b, "relay-c", 0.05)
	children := []*child{a, p, c}

	written := make(chan struct{})
	go func() {
		defer close(written)
		writeKeyed(t, b, keys, events, 4, 5)
	}()
	ctx := context.Background()
	delivered := func(relay string) int {
		var n int
		_ = b.Pool.QueryRow(ctx, `SELECT count(*) FROM `+log+` WHERE relay = $1`, relay).Scan(&n)
		return n
	}
	claimedBy := func(relay string) int {
		return b.count(t, `state = 'claimed' AND claimed_by = $1`, relay)
	}

	// SIGKILL relay-a while it publishes, and start a new relay in its place.
	require.Eventually(t, func() bool { return delivered("relay-a") > 500 && claimedBy("relay-a") > 0 },
		time.Minute, time.Millisecond, "relay-a never got busy")
	a.kill(t)
	children = append(children, startChild(t, b, "relay-a2", 0.05))

	// SIGSTOP relay-p while it holds claims, until its leases expired and
	// were rescued; then SIGCONT: whatever it still does with its old
	// claims must change nothing. A statement it sent just before the stop
	// still runs, so the pause counts once none of its statements is
	// running and it still holds claims; otherwise it is resumed and paused
	// again.
	busy := func(relay string) int {
		var n int
		_ = b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active'`, relay).Scan(&n)
		return n
	}
	for paused := false; !paused; {
		require.Eventually(t, func() bool { return claimedBy("relay-p") > 0 }, time.Minute, time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
		require.Eventually(t, func() bool { return busy("relay-p") == 0 }, time.Minute, time.Millisecond)
		if paused = claimedBy("relay-p") > 0; !paused {
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))
		}
	}
	// The rows relay-p holds while paused; other relays must take them over.
	var held []string
	rows, err := b.Pool.Query(ctx, `SELECT id::text FROM `+b.Store.Table()+` WHERE state = 'claimed' AND claimed_by = 'relay-p'`)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		held = append(held, id)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, held)
	// relay-p is stopped: only another relay's rescue can take its rows
	// out of its lease. (Their last_error says so only until a later
	// failure at another relay, such as a broker outage, overwrites it.)
	require.Eventually(t, func() bool { return claimedBy("relay-p") == 0 }, time.Minute, 10*time.Millisecond,
		"relay-p's leases were never rescued")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGCONT))

	<-written
	waitDrained(t, b, log, events, children...)
	for _, c := range []*child{p, c, children[3]} {
		c.stop(t)
	}

	ds := deliveries(t, b, log)
	dups := requireKeyOrder(t, ds)
	faulted := map[string]bool{"relay-a": true, "relay-p": true}
	byID := map[string][]string{}
	for _, d := range ds {
		byID[d.id] = append(byID[d.id], d.relay)
	}
	for _, d := range dups {
		rs := byID[d.id]
		require.Truef(t, faulted[rs[0]] || faulted[d.relay],
			"event %s delivered by %v: a duplicate must involve the killed or the paused relay", d.id, rs)
	}
	// What a faulted relay can have in flight: its publish slots, full.
	require.LessOrEqual(t, len(dups), 2*childWorkers*childBatch, "duplicates bounded by what was in flight")
	require.Zero(t, b.count(t, `state <> 'published'`), "nothing dead, nothing left")
	pLog := p.log.String()
	// Depending on where the pause caught it: inside a claim whose answer
	// came too late, before publishing, before acknowledging, or inside an
	// acknowledgement that then ran out of lease.
	require.Truef(t, strings.Contains(pLog, "lease expired before") || strings.Contains(pLog, "lease lost before acknowledgement") ||
		strings.Contains(pLog, "the rows will be rescued when their lease expires"),
		"the paused relay noticed it had lost its claims; its log:\n%s", pLog)
	t.Logf("%d deliveries of %d events; %d duplicates", len(ds), events, len(dups))
}

// count counts the outbox rows matching where, a condition in SQL.
func (b *bundle) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM `+b.Store.Table()+` WHERE `+where, args...).Scan(&n))
	return n
}

func slogToStderr() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}
